//! The keys of security groups per pod (`eniipd/security-groups`):
//! `pod_security_groups`, the groups a pod may ask for (absent: every ask
//! is refused, naming the key), and `sg_set_idle_s`, how long a set with
//! no owner keeps its ENIs.

use super::effective::or_dash;
use super::validate::{invalid_str, secs};
use super::*;

/// Validated security-group-set settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SgSettings {
    /// The groups a pod may ask for, sorted; `None`: the key is absent and
    /// every ask is refused.
    pub(crate) pod_security_groups: Option<Vec<String>>,
    /// A set (other than the node's own) with no owner this long gives
    /// its ENIs back.
    pub(crate) sg_set_idle: Duration,
}

impl SgSettings {
    /// `key=value` pairs for the effective view.
    pub(super) fn effective(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "pod_security_groups",
                or_dash(self.pod_security_groups.as_ref().map(|g| g.join(","))),
            ),
            ("sg_set_idle_s", self.sg_set_idle.as_secs().to_string()),
        ]
    }
}

impl RawConfig {
    pub(super) fn sg_settings(&self) -> Result<SgSettings, ConfigError> {
        let pod_security_groups = match &self.pod_security_groups {
            None => None,
            Some(list) => {
                let mut out: Vec<String> = Vec::new();
                for sg in list {
                    let shaped = sg.strip_prefix("sg-").is_some_and(|r| {
                        (1..=64).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_alphanumeric())
                    });
                    if !shaped {
                        return Err(invalid_str(
                            "pod_security_groups",
                            sg,
                            "security group ids (sg- then letters and digits)",
                        ));
                    }
                    if !out.contains(sg) {
                        out.push(sg.clone());
                    }
                }
                out.sort();
                Some(out)
            }
        };
        Ok(SgSettings {
            pod_security_groups,
            sg_set_idle: secs("sg_set_idle_s", &self.sg_set_idle_s, 600, 0, 604_800)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Config, ConfigError> {
        RawConfig::parse(json)?.validate()
    }

    #[test]
    fn absent_refuses_every_ask_and_idle_defaults_to_ten_minutes() {
        let c = parse("{}").unwrap().sg;
        assert_eq!(c.pod_security_groups, None);
        assert_eq!(c.sg_set_idle, Duration::from_secs(600));
        let c = parse(r#"{"pod_security_groups": ["sg-b", "sg-a", "sg-b"], "sg_set_idle_s": 5}"#)
            .unwrap()
            .sg;
        assert_eq!(c.pod_security_groups.unwrap(), ["sg-a", "sg-b"]);
        assert_eq!(c.sg_set_idle, Duration::from_secs(5));
        for (bad, key) in [
            (
                r#"{"pod_security_groups": ["default"]}"#,
                "pod_security_groups",
            ),
            (r#"{"sg_set_idle_s": -1}"#, "sg_set_idle_s"),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }
}
