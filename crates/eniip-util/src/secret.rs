//! `Secret`: a string that never prints. Access key secrets and security
//! tokens live in it so that no `Debug`, `Display`, log line or panic message
//! can carry them; the only way out is the explicit [`Secret::expose`].

use std::fmt;

/// A credential value that formats as `***`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    /// The value itself, for signing. Never log the result.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// Shows the first 4 characters of an access key id and masks the rest.
pub fn mask(id: &str) -> String {
    let shown: String = id.chars().take(4).collect();
    format!("{shown}***")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s}"), "***");
        assert!(!format!("{s:?}").contains("hunter2"));
        assert_eq!(s.expose(), "hunter2");
    }
}
