#!/usr/bin/env python3
"""Runs README.md's quick start as written and checks what it prints.

The console blocks that follow a `<!-- quickstart: NAME -->` line in
README.md are run line by line (`$ ` lines are commands, the lines under
them what they print). Each command runs in bash from the repository root,
as a reader would type it, with three differences that keep a reader's own
servers out of it:

- the servers listen on free ports, not 6379 and 7001-7005: `redis-cli`
  goes to the `make run` server's port (formatting replies as it does at
  a terminal), and `make`/`redlock` get the five
  ports through REDLOCK_PORTS and REDLOCK_SERVERS;
- `make install` installs into a temporary BINDIR/MODULEDIR, put first on
  PATH;
- the restart quarantine of `make redlock-up` is 8 s, not 60 s, so the
  waiting it shows takes seconds.

Expected output matches loosely where a run differs by nature: every run
of digits matches any number, a hex id (an owner) any hex id, an absolute
path any path, runs of spaces any spacing; a line `...` matches any lines
up to the next expected one, and a line ending in `  ...` any line that
starts as shown (a table may have more columns). A value printed under
a name (`owner: 6907d9...`) that later commands repeat is replaced there by
the value this run printed, as a reader copies it.

After the quick start, the module `make install` installed is loaded
into a real server (Debian's redis-server, and Valkey 8.1 when
REDISLOCK_VALKEY names it, as `make test` does), which must answer
`LOCK.ACQUIRE` with a token and list the module in `MODULE LIST`: an
installed file Redis refuses to load (no execute permission) fails here.

Prints one line per command (and per server loading the installed module)
and `quickstart: N passed, M failed`; exits 1 if any failed.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND_TIMEOUT_S = 180


def free_ports(n):
    """n ports free now in 20000-29999 (away from the ephemeral range and
    from a cluster bus port offset of another test)."""
    ports = []
    for port in range(20000 + (os.getpid() % 5000), 30000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == n:
            return ports
    raise SystemExit("quickstart: no free ports")


def blocks(readme):
    """{name: [(command, [expected lines])]} from the marked console blocks."""
    found = {}
    lines = readme.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"<!-- quickstart: (\S+) -->", lines[i])
        i += 1
        if not m:
            continue
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        i += 1
        steps = []
        while i < len(lines) and not lines[i].startswith("```"):
            line = lines[i]
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
            i += 1
        found[m.group(1)] = steps
    return found


def pattern(expected):
    """A regex for one expected line: numbers, hex ids (owners), absolute
    paths and spacing may differ."""
    out = []
    rest = ""
    if expected.rstrip().endswith("  ..."):
        expected, rest = expected.rstrip()[: -len("  ...")], r"(\s.*)?"
    for token in re.split(r"([0-9a-f]{16,}|/[^\s\"]+|\d+| +)", expected.rstrip()):
        if not token:
            continue
        if re.fullmatch(r"[0-9a-f]{16,}", token):
            out.append(r"[0-9a-f]+")
        elif token.startswith("/"):
            out.append(r"/[^\s\"]+")
        elif token.isdigit():
            out.append(r"\d+")
        elif token.startswith(" "):
            out.append(r"\s+")
        else:
            out.append(re.escape(token))
    return re.compile("^" + "".join(out) + rest + r"\s*$")


def matches(expected, actual):
    """Whether actual lines fit the expected ones; `...` skips lines."""
    actual = [a for a in actual if a.strip()]
    expected = [e for e in expected if e.strip()]

    def fit(e, a):
        if e == len(expected):
            return a == len(actual)
        if expected[e].strip() == "...":
            return any(fit(e + 1, k) for k in range(a, len(actual) + 1))
        return a < len(actual) and pattern(expected[e]).match(actual[a]) and fit(e + 1, a + 1)

    return fit(0, 0)


def strip_comment(command):
    """The command without a trailing `# comment` (bash would drop it too)."""
    return re.sub(r"\s+#\s.*$", "", command)


class Run:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.values = {}  # README value -> this run's value

    def check(self, what, took, problem):
        """Counts and prints a check that is not a README command: `problem`
        is None when it passed, else what went wrong."""
        if problem is None:
            self.passed += 1
            print(f"quickstart: ok     ({took:5.1f} s) {what}")
        else:
            self.failed += 1
            print(f"quickstart: FAILED ({took:5.1f} s) {what}")
            print("  " + "\n  ".join(problem.splitlines()))

    def step(self, env, command, expected):
        for readme_value, value in self.values.items():
            command = command.replace(readme_value, value)
        started = time.monotonic()
        try:
            done = subprocess.run(["bash", "-c", strip_comment(command)], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            out, code = done.stdout, done.returncode
            err = done.stderr
        except subprocess.TimeoutExpired:
            out, code, err = "", None, f"timed out after {COMMAND_TIMEOUT_S} s"
        took = time.monotonic() - started
        lines = out.splitlines()
        # `make` prints its own progress; a reader's expected output is the
        # program's, so only the lines the README shows are compared for make.
        if command.startswith("make "):
            lines = [line for line in lines if line.startswith("redislock:")]
            expected = [e for e in expected if e.startswith("redislock:") or e.strip() == "..."]
        ok = code == 0 and matches(expected, lines)
        if ok:
            self.passed += 1
            for e, a in zip(expected, lines):
                m = re.match(r"^(\w+): (\S+)$", e)
                n = re.match(r"^(\w+): (\S+)$", a)
                if m and n and m.group(1) == n.group(1) and m.group(1) in ("owner",):
                    self.values[m.group(2)] = n.group(2)
            print(f"quickstart: ok     ({took:5.1f} s) $ {command}")
        else:
            self.failed += 1
            print(f"quickstart: FAILED ({took:5.1f} s) $ {command}  (exit {code})")
            print("  expected:\n    " + "\n    ".join(expected))
            print("  stdout:\n    " + "\n    ".join(out.splitlines()))
            print("  stderr:\n    " + "\n    ".join(err.splitlines()))


def wait_for_pong(port, deadline_s=120):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            r = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True, timeout=5)
            if r.stdout.strip() == "PONG":
                return True
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.1)
    return False


def redis_cli(port, *args):
    """One command to 127.0.0.1:port, its reply as redis-cli --raw prints it."""
    try:
        done = subprocess.run(["redis-cli", "--raw", "-p", str(port), *args], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return "(no reply within 10 s)"
    return (done.stdout + done.stderr).strip()


def installed_module_problem(binary, module, port, workdir):
    """Starts `binary` on `port` loading `module`, and checks that it
    grants a lock with a token and lists the module; stops it. None if all
    went well, else what did not."""
    data = tempfile.mkdtemp(prefix="installed-", dir=workdir)
    log = os.path.join(data, "server.log")
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", data, "--save", "", "--appendonly", "no",
             "--loadmodule", module],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log_tail():
        """The log's lines about the module (why it did not load), else its end."""
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        about = [line for line in lines if "odule" in line]
        return "".join(about or lines[-5:]).rstrip()

    try:
        deadline = time.monotonic() + 30
        while redis_cli(port, "PING") != "PONG":
            if server.poll() is not None:
                return f"the server exited with status {server.returncode}; its log says:\n{log_tail()}"
            if time.monotonic() > deadline:
                return f"no PONG on port {port} within 30 s; the server log says:\n{log_tail()}"
            time.sleep(0.05)
        token = redis_cli(port, "LOCK.ACQUIRE", "quickstart:installed", "quickstart", "10000")
        if not re.fullmatch(r"\d+", token):
            return f"LOCK.ACQUIRE answered {token!r}, not a fencing token"
        modules = redis_cli(port, "MODULE", "LIST")
        if "redislock" not in modules.split():
            return f"MODULE LIST does not name redislock: {modules!r}"
        return None
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def load_installed_module(run, env, port, workdir):
    """The module `make install` put in MODULEDIR, loaded by each server
    `make test` runs the module on."""
    module = os.path.join(env["MODULEDIR"], "libredislock.so")
    binaries = [shutil.which("redis-server") or "redis-server"]
    valkey = os.environ.get("REDISLOCK_VALKEY")
    if valkey and os.path.isfile(valkey):
        binaries.append(valkey)
    for binary in binaries:
        started = time.monotonic()
        if not os.path.isfile(module):
            problem = f"{module} is missing: `make install` did not install it"
        else:
            problem = installed_module_problem(binary, module, port, workdir)
        run.check(f"{binary} --port {port} --loadmodule {module}: LOCK.ACQUIRE, MODULE LIST",
                  time.monotonic() - started, problem)


def main():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        found = blocks(f.read())
    missing = [name for name in ("one-server", "quorum") if name not in found]
    if missing:
        print(f"quickstart: README.md has no quickstart block(s) {missing}")
        print("quickstart: 0 passed, 1 failed")
        return 1
    run = Run()
    tmp = tempfile.mkdtemp(prefix="redislock-quickstart-")
    run_port, installed_port, *ports = free_ports(7)
    env = dict(os.environ)
    env.update({
        "RUN_DIR": os.path.join(tmp, "run"),
        "RUN_PORT": str(run_port),
        "REDLOCK_PORTS": " ".join(map(str, ports)),
        "REDLOCK_SERVERS": ",".join(f"redis://127.0.0.1:{p}" for p in ports),
        "REDLOCK_SERVER_ARGS": "--redislock.quarantine 8000",
        "BINDIR": os.path.join(tmp, "bin"),
        "MODULEDIR": os.path.join(tmp, "lib"),
        "PATH": os.path.join(tmp, "bin") + os.pathsep + env.get("PATH", ""),
    })
    # The README's `redis-cli` talks to the `make run` server.
    helper = os.path.join(tmp, "bin")
    os.makedirs(helper, exist_ok=True)
    with open(os.path.join(helper, "redis-cli"), "w", encoding="utf-8") as f:
        f.write(f'#!/bin/sh\nexec /usr/bin/redis-cli --no-raw -p {run_port} "$@"\n')
    os.chmod(os.path.join(helper, "redis-cli"), 0o755)

    # `make run` builds first; do that here so the wait below is for the
    # server, not for the compiler.
    subprocess.run(["make", "-s", "build"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=False)
    server = subprocess.Popen(["make", "-s", "run"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        if not wait_for_pong(run_port):
            print(f"quickstart: FAILED make run: no server answered on {run_port}")
            run.failed += 1
        else:
            for command, expected in found["one-server"]:
                run.step(env, command, expected)
        for command, expected in found["quorum"]:
            run.step(env, command, expected)
        load_installed_module(run, env, installed_port, tmp)
    finally:
        # Our servers only: the make run process group, and the five by
        # their pid files.
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
        for p in ports:
            pidfile = os.path.join(tmp, "run", str(p), "redis.pid")
            try:
                with open(pidfile, encoding="utf-8") as f:
                    os.kill(int(f.read().strip()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        subprocess.run(["rm", "-rf", tmp], check=False)
    print(f"quickstart: {run.passed} passed, {run.failed} failed")
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main())
