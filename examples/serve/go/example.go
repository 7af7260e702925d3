// The quorum from Go with redigo, through `redlock serve`: acquire, write
// through the fence with the token (LOCK.FENCED on the data server), wait
// in line, extend, release.
//
// Needs `redlock serve` (REDLOCK_SERVE_HOST / REDLOCK_SERVE_PORT, default
// 127.0.0.1:7379) and a Redis with the module for the data (DATA_HOST /
// DATA_PORT, default 127.0.0.1:6379); see ../README.md.
// Checks its own output; prints `example OK` or exits non-zero.
package main

import (
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

func expect(ok bool, format string, args ...interface{}) {
	if !ok {
		fmt.Fprintf(os.Stderr, "example FAILED: "+format+"\n", args...)
		os.Exit(1)
	}
}

func env(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}

// connect dials HOST:PORT from the environment variables PREFIX_HOST and
// PREFIX_PORT. redigo sets no read timeout unless asked: a WAIT blocks for
// as long as it waits.
func connect(prefix, defaultPort string) redis.Conn {
	address := net.JoinHostPort(env(prefix+"_HOST", "127.0.0.1"), env(prefix+"_PORT", defaultPort))
	conn, err := redis.Dial("tcp", address, redis.DialConnectTimeout(5*time.Second))
	expect(err == nil, "cannot reach %s (%v)", address, err)
	return conn
}

// lockInfo is LOCK.INFO's [field, value, ...] reply (RESP2, which redigo
// speaks) as a map, nil when nobody holds.
func lockInfo(conn redis.Conn, key string) map[string]interface{} {
	reply, err := redis.Values(conn.Do("LOCK.INFO", key))
	if err == redis.ErrNil {
		return nil
	}
	expect(err == nil, "LOCK.INFO failed: %v", err)
	info := map[string]interface{}{}
	for i := 0; i+1 < len(reply); i += 2 {
		field, _ := redis.String(reply[i], nil)
		info[field] = reply[i+1]
	}
	return info
}

func infoInt(conn redis.Conn, key, field string) int64 {
	n, _ := redis.Int64(lockInfo(conn, key)[field], nil)
	return n
}

func main() {
	// Two workers, a connection each to the endpoint (a blocked WAIT
	// occupies its connection), and the data server.
	a, b := connect("REDLOCK_SERVE", "7379"), connect("REDLOCK_SERVE", "7379")
	data := connect("DATA", "6379")
	defer a.Close()
	defer b.Close()
	defer data.Close()
	key := fmt.Sprintf("example:serve:go:%08x", rand.New(rand.NewSource(time.Now().UnixNano())).Uint32())
	fence, dataKey := key+":fence", key+":data"

	tokenA, err := redis.Int64(a.Do("LOCK.ACQUIRE", key, "worker-a", 10000))
	expect(err == nil, "worker-a's ACQUIRE answered %v, not a token", err)
	fmt.Printf("worker-a acquired %s through the quorum with token %d\n", key, tokenA)

	// Nil comes back as a nil reply without an error.
	reply, err := b.Do("LOCK.ACQUIRE", key, "worker-b", 10000)
	expect(err == nil && reply == nil, "worker-b got a lock that worker-a holds: %v %v", reply, err)
	fmt.Println("worker-b without WAIT: nil (worker-a holds it)")

	// The write runs on the data server only if the token is at least
	// every token the register has accepted.
	written, err := redis.String(data.Do("LOCK.FENCED", fence, tokenA, "SET", dataKey, "written by worker-a"))
	expect(err == nil && written == "OK", "worker-a's fenced write answered %q %v", written, err)
	fmt.Printf("worker-a wrote through the fence with token %d\n", tokenA)

	// With WAIT the call blocks, so it runs in a goroutine.
	type grant struct {
		token int64
		err   error
	}
	granted := make(chan grant, 1)
	go func() {
		token, err := redis.Int64(b.Do("LOCK.ACQUIRE", key, "worker-b", 10000, "WAIT", 15000))
		granted <- grant{token, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for infoInt(a, key, "waiters") != 1 {
		expect(len(granted) == 0, "worker-b's WAIT ended while worker-a held the lock")
		expect(time.Now().Before(deadline), "worker-b never showed up in LOCK.INFO's waiters")
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("worker-b waits in line (LOCK.INFO waiters: 1)")

	extended, err := redis.Int(a.Do("LOCK.EXTEND", key, "worker-a", 30000))
	expect(err == nil && extended == 1, "EXTEND by the holder failed: %d %v", extended, err)
	pttl := infoInt(a, key, "pttl")
	expect(pttl > 10000, "lease left after EXTEND is %d ms, expected above 10000", pttl)
	fmt.Printf("worker-a extended its lease: %d ms left\n", pttl)

	expect(len(granted) == 0, "worker-b's WAIT returned while worker-a still held the lock")
	released, err := redis.Int(a.Do("LOCK.RELEASE", key, "worker-a"))
	expect(err == nil && released == 1, "RELEASE by the holder failed: %d %v", released, err)
	var got grant
	select {
	case got = <-granted:
	case <-time.After(5 * time.Second):
	}
	expect(got.err == nil && got.token > tokenA,
		"worker-b was granted %d (%v) after the release, expected a token above %d", got.token, got.err, tokenA)
	tokenB := got.token
	fmt.Printf("worker-a released; worker-b was granted the lock with token %d\n", tokenB)

	written, err = redis.String(data.Do("LOCK.FENCED", fence, tokenB, "SET", dataKey, "written by worker-b"))
	expect(err == nil && written == "OK", "worker-b's fenced write answered %q %v", written, err)
	fmt.Printf("worker-b wrote through the fence with token %d\n", tokenB)
	// worker-a's write arrives late (a GC pause, a slow network): the data
	// server refuses it, and runs nothing. An error reply is a redis.Error.
	_, err = data.Do("LOCK.FENCED", fence, tokenA, "SET", dataKey, "late write by worker-a")
	var refused redis.Error
	expect(errors.As(err, &refused) && strings.HasPrefix(refused.Error(), "FENCED older token"),
		"worker-a's late write answered %v", err)
	stored, err := redis.String(data.Do("GET", dataKey))
	expect(err == nil && stored == "written by worker-b", "the data is %q %v", stored, err)
	fmt.Printf("worker-a's late write was refused: %v\n", refused)

	// A former holder's EXTEND answers 0: it learns it lost the lock.
	extended, err = redis.Int(a.Do("LOCK.EXTEND", key, "worker-a", 10000))
	expect(err == nil && extended == 0, "a non-holder extended: %d %v", extended, err)
	released, err = redis.Int(b.Do("LOCK.RELEASE", key, "worker-b"))
	expect(err == nil && released == 1, "worker-b's RELEASE failed: %d %v", released, err)
	fmt.Println("worker-a's EXTEND answered 0; worker-b released")

	_, err = data.Do("DEL", fence, dataKey)
	expect(err == nil, "DEL failed: %v", err)
	fmt.Println("example OK")
}
