//! What one acquisition locks: one resource, or a set of resources taken
//! all or nothing (`LOCK.MACQUIRE`), released and extended together.

use std::fmt;
use std::sync::Arc;

/// The most resources one acquisition may lock: each is a key on every
/// instance, and the set's request names them all.
pub const MAX_RESOURCES: usize = 1024;

/// The resources of one acquisition, in the order given, each named once.
/// Cheap to clone. One resource is an ordinary lock (`LOCK.ACQUIRE`);
/// several are a set, granted whole or not at all (`LOCK.MACQUIRE`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Resources(Arc<[String]>);

impl Resources {
    /// One resource.
    pub fn one(resource: &str) -> Resources {
        Resources(Arc::from([resource.to_string()]))
    }

    /// The resources `names` lists: at least one, at most
    /// `MAX_RESOURCES`, none named twice (a lock cannot be held twice by
    /// one acquisition: a repeated name is a mistake, not a wish).
    pub fn of<S: AsRef<str>>(names: &[S]) -> Result<Resources, String> {
        if names.is_empty() {
            return Err("no resource given: name at least one".into());
        }
        if names.len() > MAX_RESOURCES {
            return Err(format!("{} resources given: one acquisition locks at most {MAX_RESOURCES}", names.len()));
        }
        let mut seen = std::collections::HashSet::with_capacity(names.len());
        for name in names {
            if !seen.insert(name.as_ref()) {
                return Err(format!("resource {:?} is named twice: name each resource once", name.as_ref()));
            }
        }
        Ok(Resources(names.iter().map(|n| n.as_ref().to_string()).collect()))
    }

    /// Each resource, in the order given.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// Several resources (a set), not one.
    pub fn is_set(&self) -> bool {
        self.0.len() > 1
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: there is always at least one resource.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The resource's name; a set's names joined with `", "`, as errors and
/// `Lock::resource` show them.
impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_names_each_resource_once() {
        assert_eq!(Resources::of(&["a", "b"]).map(|r| r.to_string()), Ok("a, b".to_string()));
        assert!(Resources::of(&["a", "b", "a"]).is_err_and(|e| e.contains("\"a\" is named twice")));
        assert!(Resources::of::<&str>(&[]).is_err());
        assert!(!Resources::of(&["a"]).is_ok_and(|r| r.is_set()));
        assert_eq!(Resources::of(&["a"]), Ok(Resources::one("a")));
        let many: Vec<String> = (0..=MAX_RESOURCES).map(|i| i.to_string()).collect();
        assert!(Resources::of(&many).is_err());
    }
}
