//! The long help texts of `redlock --help` and of the subcommands whose
//! behaviour needs more than their options say (exit statuses, the
//! supervised command's contract).

pub const EXIT_STATUS_HELP: &str = "\
Exit status:
  0    success
  1    error (writing the output, or another error no retry can fix)
  2    usage or configuration error (bad argument, duration, server URL or quorum, a server
       listed twice, a TLS file unreadable or not PEM); or the servers refused the request
       itself: a ttl over redislock.max-ttl, an owner over max-owner-len, WRONGTYPE,
       authentication/NOPERM, a TLS certificate refused (tls_failed), READONLY, module missing
  3    acquire: not acquired, held by another owner (or granted too late to be valid)
  4    release: the servers answered, and fewer than a quorum released
  5    extend: the servers answered, and fewer than a quorum extended (lock lost)
  6    any command: no quorum reachable, fewer than a quorum of servers answered at all
       (connection refused, DNS failure, timeout)
  7    acquire: not acquired, the servers are in their restart quarantine (temporary)
  run: the command's own status (128+N when killed by signal N), or
  75   the lock was not taken (held, no quorum, quarantine), the command did not run
       (a usage or configuration error is still 2)
  76   the lock was lost while the command ran: an extension failed or its validity ran out
       (also after a pause of redlock itself), whatever the command returned; with
       --on-lost kill (the default) the command was stopped
  126  the command could not be executed; 127: command not found
  elect: as run, 76 when the leadership was lost while the command ran
  leader: 3 when no quorum agrees on a leader (no_leader)

With --json, every failure prints {\"error\": {\"kind\", \"message\", \"exit_code\", ...}} on stdout.
Durations: 500ms, 10s, 2m, 1h 30m (humantime).";

pub const RUN_HELP: &str = "\
The command gets REDLOCK_RESOURCE (several resources: their names joined with \", \"),
REDLOCK_RESOURCES (the names, one a line), REDLOCK_OWNER and REDLOCK_TOKEN (the
fencing token; empty in script mode) in its environment. The lock is extended while it runs and
released when it exits; SIGINT and SIGTERM sent to redlock are passed on to it.
An ask for the hold (`redlock ask`) is printed on stderr (\"redlock: asked to let go
RESOURCE token T: MESSAGE\") and the command runs on; with --on-ask term the command's
group also gets SIGTERM (the lock is released when it exits); --on-ask ignore: not heard.

The command's contract: it runs in a process group of its own (unless --foreground),
and starts only while the lock has at least 100 ms left before it must have stopped
(a lock granted later than that is released and taken again within --wait, else
exit 75). When the lock is lost (an extension fails, or its validity ends by redlock's own
clock, whatever the servers answer) the group gets SIGTERM, then SIGKILL after
--kill-after or when the validity ends, whichever is first: it is dead before
another client can be granted the lock. Processes of the group still running when
the command exits are stopped the same way before the release. If redlock dies,
kill -9 included, the group gets SIGKILL. A process that leaves the group (setsid, a
daemon) is out of reach: only the fencing token stops its writes.

Fence the command's writes where the data lives: on a Redis with the module,
each write through the register of LOCK.FENCED runs only while no newer holder
has written, so a holder paused past its lease is refused:
  redis-cli -h data LOCK.FENCED myreg \"$REDLOCK_TOKEN\" SET k v

Exit status: the command's (128+N if killed by signal N); 75 if the lock was not
taken (the command did not run); 76 if the lock was lost at any moment while the
command ran (its lease ran out, an extension failed, or fewer than a quorum still
held it at the release), whatever the command returned, stopped or not
(--on-lost); 126/127 if the command could not be executed / was not found.

Several resources are taken all or nothing, with one owner and one token, and
need `--` before the command (`redlock run a b --ttl 30s -- cmd`); a command that
has a `--` of its own then needs one before it (`redlock run a -- cmd -- x`).

Example: redlock run nightly-report --ttl 30s --wait 5m -- ./report.sh full";

pub const ELECT_HELP: &str = "\
Campaigns in the election's fair line (no deadline) and runs COMMAND while this
process leads, with REDLOCK_ELECTION (NAME), REDLOCK_VALUE (--value) and
REDLOCK_TOKEN (the term: the leader's fencing token, larger than every earlier
leader's) in its environment. The leadership is bound to this process's
connections (as with --session): if redlock dies, kill -9 included, the command
dies with it and the next candidate leads a lock-delay later. The moment the
leadership is lost (an extension reached no quorum, or its validity ran out by
redlock's own clock), the command's process group gets SIGTERM, then SIGKILL
after --kill-after or when the validity ends, whichever is first: it is dead
before another candidate can lead. A leadership won with less than 100 ms left
before that instant starts no command: it waits for its next extension, or is
given up and campaigned for again. The lock-delay (how long the servers keep a
leader cut off by the network) is by default ttl/3 + the request timeout + the
drift + 200 ms + --kill-after, at most the ttl, so that a graceful stop gets its
grace where the ttl allows. With --again, redlock campaigns again once the
command ended or was stopped (until SIGINT/SIGTERM).

Fence the command's writes with the term where the data lives (a Redis with
the module): each write through the register of LOCK.FENCED runs only while no
later leader has written:
  redis-cli -h data LOCK.FENCED myreg \"$REDLOCK_TOKEN\" SET k v

Exit status (without --again): the command's (128+N if killed by signal N);
76 if the leadership was lost while the command ran; 126/127 if the command
could not be executed / was not found; 128+N if interrupted while campaigning.

Example: redlock elect nightly --value \"$(hostname)\" --ttl 10s -- ./cron-jobs.sh";

pub const LEADER_HELP: &str = "\
Reads LOCK.INFO of the election on every server: a leader only when a quorum
of them agree on the same holder, term and value. Prints value and term (with
--json {\"value\": ..., \"term\": ...}); exit 3 (kind no_leader) when no
quorum agrees on a leader, 6 when too few servers answered. With --watch, a
line (or JSON object) per change until interrupted: each new term (a leader
that lost its hold and won again too: its new term is its new fence), each new
value a leader proclaims, never the same term and value twice, never a lower term after a higher one, however short
the term: it hears each server's announcements of the election's changes, and
subscribes again every --interval to a server it lost (reading the leader at
that interval while fewer than a quorum can be heard).";

pub const WATCH_HELP: &str = "\
Subscribes to the lock's channel on every server and prints each change once a
quorum of servers announced it: KIND TOKEN OWNER [VALUE] (with --json one
object per line: kind, token, owner, value, at). Kinds: grant, handoff (a
waiter granted), release, expire, cut (value: the new deadline, Unix ms),
session, revoke, resize (value: the new limit), proclaim. A grant carries the
lock's fencing token; an end carries its hold's. Ends are announced only for a
key the servers' redislock.notify names (CONFIG SET redislock.notify
'jobs:*'): a server whose setting matches no such key is reported once on
stderr. A lost server is subscribed again every --interval, and what it holds
then is read: a hold it no longer has ended there. Runs until interrupted
(SIGINT or SIGTERM: exit 0).";

pub const MEMBERS_HELP: &str = "\
Reads LOCK.INFO of the group's key (redlock:group:NAME) on every server and
prints the members a quorum of them list, in join order: TOKEN OWNER VALUE
(with --json an array of objects: token, owner, value). The token is the
hold's as the client reconciled it, the value the one most servers hold. Exit
6 when too few servers answered. With --watch, then a line (or JSON object:
event, token, owner, value, at) per change once a quorum announced it: join
TOKEN OWNER VALUE, value TOKEN OWNER VALUE (a proclamation), leave TOKEN
OWNER, until interrupted (exit 0). Leaves are announced only where the
servers' redislock.notify names the key (CONFIG SET redislock.notify
'redlock:group:*'). Members join with the library's Group::join.";

pub const SERVE_HELP: &str = "\
Served (each through the quorum of --servers, with the module's syntax and
replies): LOCK.ACQUIRE key owner ttl-ms [SHARED] [FENCE min-token] [WAIT
timeout-ms] [SESSION [DELAY ms]] (the quorum's fencing token, or nil; SESSION
binds the hold to the client's connection: kept extended while it lives,
released, or cut to DELAY, when it closes), LOCK.RELEASE key owner and
LOCK.EXTEND key owner ttl-ms (1 when a quorum did it, else 0), LOCK.INFO key
(what a quorum of the servers agrees on). Around them, what Redis clients send
when they connect: HELLO [2|3] [AUTH user pass] [SETNAME name], AUTH, PING,
ECHO, SELECT 0, CLIENT SETNAME|GETNAME|ID|SETINFO|INFO, COMMAND [COUNT|INFO|
DOCS|LIST], INFO (its # redlock section: the servers, whether each answers,
the quorum, this endpoint's clients and acquisitions), QUIT, RESET.

Not served yet (a clear error names it): LIMIT, PERMITS, VALUE, FENCE with WAIT, LOCK.MACQUIRE/MRELEASE/MEXTEND/PROCLAIM/WAITERS/TOP,
SUBSCRIBE; ACL rules beyond who may log in (a users file that has one is
refused at start).

Listeners: --listen (plain TCP), --tls-port (TLS, on the host of --listen;
with --no-tcp TLS alone), --unixsocket. Precedence of the options: a flag,
then its environment variable, then --config's file, then the default.

Each connection is served on its own: a WAIT blocks its own client only, and
a client that closes while it waits gives its place in line up at once. A
request over 1 MB, or one the protocol cannot parse, is answered with an error
and its connection closed. Runs until interrupted (SIGINT/SIGTERM).

Example: redlock serve --servers redis://a:6379,redis://b:6379,redis://c:6379
         redis-cli -p 7379 LOCK.ACQUIRE orders:42 worker-1 10000 WAIT 5000
         redlock serve --config /etc/redlock/serve.conf --tls-port 7380 \
           --tls-cert-file serve.crt --tls-key-file serve.key --tls-ca-cert-file ca.crt";
