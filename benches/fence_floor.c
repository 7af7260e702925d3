/* benches/fence_floor.c -- a measuring stick for benches/fence.sh, not part
 * of redislock: a module whose commands run another command through RM_Call
 * with no check at all, so that the cost of the server's RM_Call path can be
 * told apart from the cost of LOCK.GUARD's own work (the hold's check).
 *
 *   FLOOR.CALL command [arg ...]      RM_Call with LOCK.GUARD's flags, vCSME!0
 *   FLOOR.CALLBARE command [arg ...]  RM_Call with v! only (no ACL user, no
 *                                     script rules, no OOM check, RESP2)
 *   FLOOR.AFTER3 a b c command [arg ...]
 *   FLOOR.AFTER2 a b command [arg ...]
 *                                     FLOOR.CALL after 3 (2) arguments it
 *                                     ignores: LOCK.GUARD's (LOCK.FENCED's)
 *                                     request with no check
 *   FLOOR.READ key [arg ...]          opens the key for reading and answers 1,
 *                                     whatever follows: the least a module
 *                                     command that reads a key does (given
 *                                     LOCK.CHECK's three arguments, its floor)
 *
 * Both answer with the command's reply (RM_ReplyWithCallReply), as LOCK.GUARD
 * does. Self-contained (it takes the API through RedisModule_GetApi, as
 * redismodule.h does), so that it builds with `cc -shared` alone. */
#include <stddef.h>
#include <string.h>

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleCallReply RedisModuleCallReply;
typedef struct RedisModuleKey RedisModuleKey;
typedef int (*CmdFunc)(RedisModuleCtx *, RedisModuleString **, int);

#define OK 0
#define ERR 1
#define APIVER_1 1
#define READ 1

static int (*GetApi)(const char *, void *);
static int (*SetModuleAttribs)(RedisModuleCtx *, const char *, int, int);
static int (*CreateCommand)(RedisModuleCtx *, const char *, CmdFunc, const char *, int, int, int);
static RedisModuleCallReply *(*Call)(RedisModuleCtx *, const char *, const char *, ...);
static int (*ReplyWithCallReply)(RedisModuleCtx *, RedisModuleCallReply *);
static void (*FreeCallReply)(RedisModuleCallReply *);
static int (*ReplyWithError)(RedisModuleCtx *, const char *);
static int (*WrongArity)(RedisModuleCtx *);
static const char *(*StringPtrLen)(const RedisModuleString *, size_t *);
static void *(*OpenKey)(RedisModuleCtx *, RedisModuleString *, int);
static int (*KeyType)(RedisModuleKey *);
static void (*CloseKey)(RedisModuleKey *);
static int (*ReplyWithLongLong)(RedisModuleCtx *, long long);

/* RM_Call of argv[at] with argv[at + 1 ...]. */
static int run(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int at, const char *flags) {
    if (argc < at + 1) return WrongArity(ctx);
    size_t len;
    const char *name = StringPtrLen(argv[at], &len);
    char cname[128];
    if (len >= sizeof cname || memchr(name, 0, len)) return ReplyWithError(ctx, "ERR no such command");
    memcpy(cname, name, len);
    cname[len] = 0;
    RedisModuleCallReply *reply = Call(ctx, cname, flags, argv + at + 1, (size_t)(argc - at - 1));
    if (!reply) return ReplyWithError(ctx, "ERR the server refused the call");
    if (ReplyWithCallReply(ctx, reply) != OK) ReplyWithError(ctx, "ERR reply not passed on");
    FreeCallReply(reply);
    return OK;
}

static int call_guard_flags(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return run(ctx, argv, argc, 1, "vCSME!0");
}

static int call_bare(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return run(ctx, argv, argc, 1, "v!");
}

static int call_after3(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return run(ctx, argv, argc, 4, "vCSME!0");
}

static int call_after2(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return run(ctx, argv, argc, 3, "vCSME!0");
}

static int read_key(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 2) return WrongArity(ctx);
    RedisModuleKey *key = OpenKey(ctx, argv[1], READ);
    int type = KeyType(key);
    CloseKey(key);
    return ReplyWithLongLong(ctx, type != 0);
}

#define API(name, var) \
    if (GetApi("RedisModule_" name, (void *)&var) != OK) return ERR

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    GetApi = (int (*)(const char *, void *))(unsigned long)((void **)ctx)[0];
    API("SetModuleAttribs", SetModuleAttribs);
    API("CreateCommand", CreateCommand);
    API("Call", Call);
    API("ReplyWithCallReply", ReplyWithCallReply);
    API("FreeCallReply", FreeCallReply);
    API("ReplyWithError", ReplyWithError);
    API("WrongArity", WrongArity);
    API("StringPtrLen", StringPtrLen);
    API("OpenKey", OpenKey);
    API("KeyType", KeyType);
    API("CloseKey", CloseKey);
    API("ReplyWithLongLong", ReplyWithLongLong);
    SetModuleAttribs(ctx, "fencefloor", 1, APIVER_1);
    if (CreateCommand(ctx, "floor.call", call_guard_flags, "write", 0, 0, 0) != OK) return ERR;
    if (CreateCommand(ctx, "floor.callbare", call_bare, "write", 0, 0, 0) != OK) return ERR;
    if (CreateCommand(ctx, "floor.after3", call_after3, "write", 0, 0, 0) != OK) return ERR;
    if (CreateCommand(ctx, "floor.after2", call_after2, "write", 0, 0, 0) != OK) return ERR;
    if (CreateCommand(ctx, "floor.read", read_key, "readonly fast", 1, 1, 1) != OK) return ERR;
    return OK;
}
