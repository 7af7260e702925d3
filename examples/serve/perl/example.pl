#!/usr/bin/env perl
# The quorum from Perl with Redis.pm, through `redlock serve`: acquire,
# write through the fence with the token (LOCK.FENCED on the data server),
# wait in line, extend, release.
#
# Needs `redlock serve` (REDLOCK_SERVE_HOST / REDLOCK_SERVE_PORT, default
# 127.0.0.1:7379) and a Redis with the module for the data (DATA_HOST /
# DATA_PORT, default 127.0.0.1:6379); see ../README.md.
# Checks its own output; prints `example OK` or exits non-zero.
use strict;
use warnings;
use POSIX ();
use Redis;
use Time::HiRes qw(sleep time);

$| = 1;
my $waiter;    # worker-b's waiting process, while it runs

sub expect {
    my ($ok, $what) = @_;
    return if $ok;
    kill 'TERM', $waiter if $waiter;
    print STDERR "example FAILED: $what\n";
    exit 1;
}

# Redis.pm sends a method's name as the command (splitting it at `_`):
# LOCK.ACQUIRE is called by name, `$redis->$acquire(...)`.
my ($acquire, $release, $extend, $info, $fenced) =
  ('LOCK.ACQUIRE', 'LOCK.RELEASE', 'LOCK.EXTEND', 'LOCK.INFO', 'LOCK.FENCED');

# Redis.pm has no read timeout unless given one: a WAIT blocks for as long
# as it waits.
sub connect_to {
    my ($prefix, $default_port) = @_;
    my $server = ($ENV{"${prefix}_HOST"} || '127.0.0.1') . ':' . ($ENV{"${prefix}_PORT"} || $default_port);
    my $redis = eval { Redis->new(server => $server, reconnect => 0) };
    expect($redis, "cannot reach $server ($@)");
    return $redis;
}

# LOCK.INFO's [field, value, ...] reply as a hash reference; undef when
# nobody holds.
sub lock_info {
    my ($redis, $key) = @_;
    my $reply = $redis->$info($key);
    return $reply ? {@$reply} : undef;
}

# Two workers, a connection each to the endpoint (a blocked WAIT occupies
# its connection), and the data server.
my $worker_a = connect_to('REDLOCK_SERVE', 7379);
my $worker_b = connect_to('REDLOCK_SERVE', 7379);
my $data = connect_to('DATA', 6379);
my $key = sprintf 'example:serve:perl:%08x', int(rand(2**32));
my ($fence, $data_key) = ("$key:fence", "$key:data");

eval {
    my $token_a = $worker_a->$acquire($key, 'worker-a', 10000);
    expect(defined $token_a && $token_a =~ /^\d+$/, "worker-a's ACQUIRE answered " . ($token_a // 'nil') . ', not a token');
    print "worker-a acquired $key through the quorum with token $token_a\n";

    expect(!defined $worker_b->$acquire($key, 'worker-b', 10000), 'worker-b got a lock that worker-a holds');
    print "worker-b without WAIT: nil (worker-a holds it)\n";

    # The write runs on the data server only if the token is at least
    # every token the register has accepted.
    my $written = $data->$fenced($fence, $token_a, 'SET', $data_key, 'written by worker-a');
    expect($written eq 'OK', "worker-a's fenced write answered $written");
    print "worker-a wrote through the fence with token $token_a\n";

    # With WAIT the call blocks, so it runs in a child process, which
    # prints what it was granted into a pipe. Redis.pm reconnects by itself
    # in a child after a fork.
    pipe(my $granted, my $report) or die "pipe: $!";
    $waiter = fork // die "fork: $!";
    if ($waiter == 0) {
        close $granted;
        my $token = eval { $worker_b->$acquire($key, 'worker-b', 10000, 'WAIT', 15000) };
        print $report $token // "nil: $@", "\n";
        close $report;
        POSIX::_exit(0);
    }
    close $report;
    my $deadline = time + 5;
    until ((lock_info($worker_a, $key) // {})->{waiters} == 1) {
        expect(waitpid($waiter, POSIX::WNOHANG) == 0, "worker-b's WAIT ended while worker-a held the lock");
        expect(time < $deadline, "worker-b never showed up in LOCK.INFO's waiters");
        sleep 0.01;
    }
    print "worker-b waits in line (LOCK.INFO waiters: 1)\n";

    expect($worker_a->$extend($key, 'worker-a', 30000) == 1, 'EXTEND by the holder failed');
    my $pttl = lock_info($worker_a, $key)->{pttl};
    expect($pttl > 10000, "lease left after EXTEND is $pttl ms, expected above 10000");
    print "worker-a extended its lease: $pttl ms left\n";

    expect(waitpid($waiter, POSIX::WNOHANG) == 0, "worker-b's WAIT returned while worker-a still held the lock");
    expect($worker_a->$release($key, 'worker-a') == 1, 'RELEASE by the holder failed');
    chomp(my $token_b = <$granted> // 'nothing');
    waitpid($waiter, 0);
    $waiter = undef;
    expect($token_b =~ /^\d+$/ && $token_b > $token_a,
        "worker-b was granted '$token_b' after the release, expected a token above $token_a");
    print "worker-a released; worker-b was granted the lock with token $token_b\n";

    $written = $data->$fenced($fence, $token_b, 'SET', $data_key, 'written by worker-b');
    expect($written eq 'OK', "worker-b's fenced write answered $written");
    print "worker-b wrote through the fence with token $token_b\n";
    # worker-a's write arrives late (a paused process, a slow network): the
    # data server refuses it, and runs nothing. Redis.pm dies with an error
    # reply, as "[COMMAND] error, at ...".
    eval { $data->$fenced($fence, $token_a, 'SET', $data_key, 'late write by worker-a') };
    my ($refused) = ($@ // '') =~ /^\[LOCK\.FENCED\] (.*?), +at /;
    expect(defined $refused && $refused =~ /^FENCED older token/, "worker-a's late write answered " . ($@ || 'OK'));
    print "worker-a's late write was refused: $refused\n";
    my $stored = $data->get($data_key) // 'nil';
    expect($stored eq 'written by worker-b', "the data is '$stored'");

    # A former holder's EXTEND answers 0: it learns it lost the lock.
    expect($worker_a->$extend($key, 'worker-a', 10000) == 0, 'a non-holder extended');
    expect($worker_b->$release($key, 'worker-b') == 1, "worker-b's RELEASE failed");
    print "worker-a's EXTEND answered 0; worker-b released\n";

    $data->del($fence, $data_key);
    1;
} or expect(0, $@ =~ s/\s+\z//r);
print "example OK\n";
