<?php
// The quorum from PHP with phpredis, through `redlock serve`: acquire,
// write through the fence with the token (LOCK.FENCED on the data server),
// wait in line, extend, release.
//
// Needs `redlock serve` (REDLOCK_SERVE_HOST / REDLOCK_SERVE_PORT, default
// 127.0.0.1:7379) and a Redis with the module for the data (DATA_HOST /
// DATA_PORT, default 127.0.0.1:6379); see ../README.md.
// Checks its own output; prints `example OK` or exits non-zero.

// worker-b's waiting process, while it runs.
$waiter = null;

function expect(bool $ok, string $what): void
{
    global $waiter;
    if (!$ok) {
        if (is_resource($waiter)) {
            proc_terminate($waiter);
        }
        fwrite(STDERR, "example FAILED: $what\n");
        exit(1);
    }
}

function connect(string $prefix, int $defaultPort): Redis
{
    $host = getenv("{$prefix}_HOST") ?: '127.0.0.1';
    $port = (int) (getenv("{$prefix}_PORT") ?: $defaultPort);
    $redis = new Redis();
    try {
        // A read timeout of 60 s: a WAIT blocks for as long as it waits.
        $redis->connect($host, $port, 5.0, null, 0, 60.0);
    } catch (RedisException $e) {
        expect(false, "cannot reach $host:$port ({$e->getMessage()})");
    }
    return $redis;
}

// phpredis answers both nil and an error reply with false, the error's
// text in getLastError(), but throws a RedisException for an error whose
// code it does not know (FENCED). call() answers nil as null and throws
// every error reply as a RuntimeException.
function call(Redis $redis, ...$args)
{
    $redis->clearLastError();
    try {
        $reply = $redis->rawCommand(...$args);
    } catch (RedisException $e) {
        if ($redis->getLastError() === null) {
            throw $e; // no reply: the connection failed
        }
    }
    $error = $redis->getLastError();
    if ($error !== null) {
        throw new RuntimeException($error);
    }
    return $reply === false ? null : $reply;
}

// LOCK.INFO's [field, value, ...] reply (RESP2, which phpredis speaks) as
// an array by field; null when nobody holds.
function lock_info(Redis $redis, string $key): ?array
{
    $reply = call($redis, 'LOCK.INFO', $key);
    if ($reply === null) {
        return null;
    }
    $info = [];
    for ($i = 0; $i + 1 < count($reply); $i += 2) {
        $info[$reply[$i]] = $reply[$i + 1];
    }
    return $info;
}

// `php example.php wait KEY`: worker-b's WAIT, in a process of its own
// (PHP has no threads, and a blocked WAIT holds its connection); it prints
// what it was granted.
if (($argv[1] ?? '') === 'wait') {
    $b = connect('REDLOCK_SERVE', 7379);
    $token = call($b, 'LOCK.ACQUIRE', $argv[2], 'worker-b', 10000, 'WAIT', 15000);
    echo $token ?? 'nil', "\n";
    exit(0);
}

try {
    $a = connect('REDLOCK_SERVE', 7379);
    $b = connect('REDLOCK_SERVE', 7379);
    $data = connect('DATA', 6379);
    $key = 'example:serve:php:' . bin2hex(random_bytes(4));
    $fence = "$key:fence";
    $dataKey = "$key:data";

    $tokenA = call($a, 'LOCK.ACQUIRE', $key, 'worker-a', 10000);
    expect(is_int($tokenA), "worker-a's ACQUIRE answered " . var_export($tokenA, true) . ', not a token');
    echo "worker-a acquired $key through the quorum with token $tokenA\n";

    expect(call($b, 'LOCK.ACQUIRE', $key, 'worker-b', 10000) === null, 'worker-b got a lock that worker-a holds');
    echo "worker-b without WAIT: nil (worker-a holds it)\n";

    // The write runs on the data server only if the token is at least
    // every token the register has accepted.
    $written = call($data, 'LOCK.FENCED', $fence, $tokenA, 'SET', $dataKey, 'written by worker-a');
    expect($written === true, "worker-a's fenced write answered " . var_export($written, true));
    echo "worker-a wrote through the fence with token $tokenA\n";

    $waiter = proc_open([PHP_BINARY, __FILE__, 'wait', $key], [1 => ['pipe', 'w']], $pipes);
    expect($waiter !== false, 'could not start the waiter');
    $deadline = microtime(true) + 5;
    while ((lock_info($a, $key)['waiters'] ?? 0) !== 1) {
        expect(proc_get_status($waiter)['running'], "worker-b's WAIT ended while worker-a held the lock");
        expect(microtime(true) < $deadline, "worker-b never showed up in LOCK.INFO's waiters");
        usleep(10000);
    }
    echo "worker-b waits in line (LOCK.INFO waiters: 1)\n";

    expect(call($a, 'LOCK.EXTEND', $key, 'worker-a', 30000) === 1, 'EXTEND by the holder failed');
    $pttl = lock_info($a, $key)['pttl'];
    expect($pttl > 10000, "lease left after EXTEND is $pttl ms, expected above 10000");
    echo "worker-a extended its lease: $pttl ms left\n";

    expect(proc_get_status($waiter)['running'], "worker-b's WAIT returned while worker-a still held the lock");
    expect(call($a, 'LOCK.RELEASE', $key, 'worker-a') === 1, 'RELEASE by the holder failed');
    $granted = trim(stream_get_contents($pipes[1]));
    proc_close($waiter);
    $tokenB = (int) $granted;
    expect(ctype_digit($granted) && $tokenB > $tokenA,
        "worker-b was granted '$granted' after the release, expected a token above $tokenA");
    echo "worker-a released; worker-b was granted the lock with token $tokenB\n";

    $written = call($data, 'LOCK.FENCED', $fence, $tokenB, 'SET', $dataKey, 'written by worker-b');
    expect($written === true, "worker-b's fenced write answered " . var_export($written, true));
    echo "worker-b wrote through the fence with token $tokenB\n";
    // worker-a's write arrives late (a paused process, a slow network):
    // the data server refuses it, and runs nothing.
    try {
        call($data, 'LOCK.FENCED', $fence, $tokenA, 'SET', $dataKey, 'late write by worker-a');
        expect(false, "the data server took worker-a's late write");
    } catch (RuntimeException $e) {
        expect(str_starts_with($e->getMessage(), 'FENCED older token'), "worker-a's late write answered {$e->getMessage()}");
        echo "worker-a's late write was refused: {$e->getMessage()}\n";
    }
    $stored = $data->get($dataKey);
    expect($stored === 'written by worker-b', "the data is '$stored'");

    // A former holder's EXTEND answers 0: it learns it lost the lock.
    expect(call($a, 'LOCK.EXTEND', $key, 'worker-a', 10000) === 0, 'a non-holder extended');
    expect(call($b, 'LOCK.RELEASE', $key, 'worker-b') === 1, "worker-b's RELEASE failed");
    echo "worker-a's EXTEND answered 0; worker-b released\n";

    $data->del($fence, $dataKey);
    echo "example OK\n";
} catch (RuntimeException | RedisException $e) {
    expect(false, $e->getMessage());
}
