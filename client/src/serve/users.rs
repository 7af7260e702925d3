//! Who may log in to `redlock serve`: nobody needs to (no password), the
//! `default` user of `--requirepass`, or the users of an ACL file
//! (`--aclfile`) in redis-server's syntax. Only logging in is honoured:
//! every logged-in user may run every served command, so a rule that
//! would narrow what a user may do is refused, never ignored.

use std::path::Path;

/// One user: whether it may log in, and with which passwords.
#[derive(Clone, Debug, PartialEq, Eq)]
struct User {
    name: String,
    enabled: bool,
    /// Any password is taken (`nopass`).
    nopass: bool,
    passwords: Vec<Vec<u8>>,
}

/// The users of an endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Users {
    users: Vec<User>,
}

impl Users {
    /// No password: every client is the `default` user from the start.
    pub fn open() -> Users {
        Users { users: vec![User { name: "default".into(), enabled: true, nopass: true, passwords: Vec::new() }] }
    }

    /// The `default` user with `password`, as redis-server's requirepass.
    pub fn with_password(password: &str) -> Users {
        Users { users: vec![User { name: "default".into(), enabled: true, nopass: false, passwords: vec![password.as_bytes().to_vec()] }] }
    }

    /// The users of the ACL file at `path`; an error names the file, the
    /// line and what is wrong with it (never a password).
    pub fn load(path: &Path) -> Result<Users, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("--aclfile {}: cannot read it: {e}", path.display()))?;
        Users::parse(&text).map_err(|e| format!("--aclfile {}:{e}", path.display()))
    }

    /// An ACL file's text: one `user NAME RULE...` per line; blank lines
    /// and `#` comments are skipped. A user the file does not name does
    /// not exist, `default` included: with a users file every client logs
    /// in, unless the file gives `default` `on nopass`. An error starts
    /// with the line's number (`12: ...`).
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut users: Vec<User> = Vec::new();
        for (number, line) in (1u32..).zip(text.lines()) {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let user = user_line(line).map_err(|e| format!("{number}: {e}"))?;
            if users.iter().any(|u| u.name == user.name) {
                return Err(format!("{number}: user '{}' is given twice (one line per user)", user.name));
            }
            users.push(user);
        }
        Ok(Users { users })
    }

    /// Whether a new connection is logged in as `default` at once (an
    /// enabled `default` that takes any password).
    pub fn open_to_all(&self) -> bool {
        self.find(b"default").is_some_and(|u| u.enabled && u.nopass)
    }

    /// Whether `AUTH password` (no user name) makes no sense: `default`
    /// takes any password, as redis-server's "no password configured".
    pub fn default_needs_no_password(&self) -> bool {
        self.find(b"default").is_some_and(|u| u.nopass)
    }

    /// Whether `user` may log in with `password`.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        self.find(user).is_some_and(|u| u.enabled && (u.nopass || u.passwords.iter().any(|p| same(p, password))))
    }

    fn find(&self, name: &[u8]) -> Option<&User> {
        self.users.iter().find(|u| u.name.as_bytes() == name)
    }
}

/// The rules that agree with what the endpoint does (every logged-in user
/// runs every served command, on every key): taken, and nothing to do.
const GRANTING_ALL: &[&str] = &["~*", "allkeys", "&*", "allchannels", "+@all", "allcommands"];

/// One `user NAME RULE...` line, redis-server's ACL rules for logging in.
fn user_line(line: &str) -> Result<User, String> {
    if line.contains(['"', '\'']) {
        return Err("quotes are not supported in a users file: give each rule as one word".into());
    }
    let mut words = line.split_whitespace();
    match words.next() {
        Some("user") => {}
        Some(other) => {
            return Err(format!(
                "'{}' is not a users file line: each line is 'user NAME RULE...' (e.g. user alice on >password)",
                shown(other)
            ))
        }
        None => return Err("empty line".into()),
    }
    let Some(name) = words.next() else { return Err("'user' without a name".into()) };
    let mut user = User { name: name.to_string(), enabled: false, nopass: false, passwords: Vec::new() };
    for rule in words {
        match rule {
            "on" => user.enabled = true,
            "off" => user.enabled = false,
            "nopass" => {
                user.nopass = true;
                user.passwords.clear();
            }
            "resetpass" => {
                user.nopass = false;
                user.passwords.clear();
            }
            // Its permission part (-@all, no keys) would refuse every
            // command: with `reset`, a line must grant them all again.
            "reset" => {
                user.enabled = false;
                user.nopass = false;
                user.passwords.clear();
            }
            _ if GRANTING_ALL.contains(&rule) => {}
            _ => {
                if let Some(password) = rule.strip_prefix('>') {
                    user.nopass = false;
                    if !user.passwords.iter().any(|p| p.as_slice() == password.as_bytes()) {
                        user.passwords.push(password.as_bytes().to_vec());
                    }
                } else if let Some(password) = rule.strip_prefix('<') {
                    let before = user.passwords.len();
                    user.passwords.retain(|p| p.as_slice() != password.as_bytes());
                    if user.passwords.len() == before {
                        return Err(format!("user '{name}': a '<' rule removes a password the user does not have"));
                    }
                } else if rule.starts_with('#') || rule.starts_with('!') {
                    return Err(format!(
                        "user '{name}': password hashes ('#...', '!...') are not supported by redlock serve: give the password as '>password'"
                    ));
                } else {
                    return Err(format!(
                        "user '{name}': rule '{}' is not honoured by redlock serve: it honours who may log in (on, off, \
                         nopass, >password, <password, resetpass, reset), and every logged-in user may run every served \
                         command on every key (~*, allkeys, &*, allchannels, +@all, allcommands are taken as such)",
                        shown(rule)
                    ));
                }
            }
        }
    }
    Ok(user)
}

/// A word of a line as an error shows it: at most 40 characters.
fn shown(word: &str) -> String {
    word.chars().take(40).collect()
}

/// Whether two passwords are equal, in a time that does not tell how
/// much of one matched.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::Users;

    #[test]
    fn users_file_lines() {
        let users =
            Users::parse("# the team\n\nuser alice on >one >two ~* +@all\nuser bob off >pw\nuser carol on nopass\n").expect("parses");
        assert!(users.check(b"alice", b"one") && users.check(b"alice", b"two"));
        assert!(!users.check(b"alice", b"three"), "a wrong password");
        assert!(!users.check(b"bob", b"pw"), "a disabled user");
        assert!(users.check(b"carol", b"anything"), "nopass");
        assert!(!users.check(b"default", b""), "no default user unless named");
        assert!(!users.open_to_all());
        assert!(Users::parse("user default on nopass").expect("parses").open_to_all());
        assert!(!Users::parse("user alice on >a <a").expect("parses").check(b"alice", b"a"), "removed");
    }

    #[test]
    fn users_file_refuses_what_it_does_not_honour() {
        for (text, said) in [
            ("user alice on >pw\nuser bob on -@all", "2: user 'bob': rule '-@all' is not honoured"),
            ("user alice on >pw ~orders:*", "1: user 'alice': rule '~orders:*'"),
            ("requirepass x", "1: 'requirepass' is not a users file line"),
            ("user a on #5e884898da28", "1: user 'a': password hashes"),
            ("user a on\nuser a off", "2: user 'a' is given twice"),
            ("user a on \">p w\"", "1: quotes are not supported"),
            ("user", "1: 'user' without a name"),
        ] {
            let e = Users::parse(text).expect_err(text);
            assert!(e.starts_with(said), "{text:?}: {e}");
        }
    }
}
