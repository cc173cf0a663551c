//! TagResources, UntagResources and ListTagResources for ENIs
//! (`ResourceType=eni`), with the documented limits: 1..50 resources and
//! 1..20 tags per call, 20 tags per resource, keys 1..128 characters not
//! starting with `aliyun` or `acs:` and without `http://`/`https://`,
//! values up to 128 characters.
//!
//! [`Tagging`] borrows what tagging touches: the account (its region) and
//! the ENIs.

use serde_json::{json, Value};

use super::account::Account;
use super::eni_table::SimEnis;
use super::params::{err, list, missing, need, tags, tags_match, ApiError, Params};

/// Tags a resource may carry at most.
const MAX_TAGS_PER_RESOURCE: usize = 20;

fn resource_type(p: &Params) -> Result<(), ApiError> {
    let t = need(p, "ResourceType")?;
    if !t.eq_ignore_ascii_case("eni") {
        return Err(err(
            404,
            "InvalidResourceType.NotFound",
            "The ResourceType provided does not exist in our records.",
        ));
    }
    Ok(())
}

fn malformed_key(k: &str) -> bool {
    let lower = k.to_ascii_lowercase();
    k.is_empty()
        || k.chars().count() > 128
        || lower.starts_with("aliyun")
        || lower.starts_with("acs:")
        || lower.contains("http://")
        || lower.contains("https://")
}

/// The parts tagging touches.
pub(super) struct Tagging<'a> {
    pub(super) account: &'a Account,
    pub(super) enis: &'a mut SimEnis,
}

impl Tagging<'_> {
    /// The ENIs named by `ResourceId.N` (1..50), all of which must exist.
    fn tag_targets(&self, p: &Params, required: bool) -> Result<Vec<String>, ApiError> {
        let ids = list(p, "ResourceId", 50)?;
        if ids.is_empty() && required {
            return Err(missing("ResourceId.1"));
        }
        if ids.iter().any(|id| self.enis.get(id).is_err()) {
            return Err(err(
                404,
                "InvalidResourceId.NotFound",
                "The specified ResourceIds are not found in our records.",
            ));
        }
        Ok(ids)
    }

    /// TagResources: all or nothing.
    pub(super) fn tag_resources(&mut self, p: &Params) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        resource_type(p)?;
        let ids = self.tag_targets(p, true)?;
        let new = tags(p)?;
        if new.is_empty() {
            return Err(missing("Tag.1.Key"));
        }
        for (i, (k, v)) in new.iter().enumerate() {
            if malformed_key(k) {
                return Err(err(
                    400,
                    "InvalidTagKey.Malformed",
                    format!("The specified Tag.{}.Key is not valid.", i + 1),
                ));
            }
            let lv = v.to_ascii_lowercase();
            if v.chars().count() > 128 || lv.contains("http://") || lv.contains("https://") {
                return Err(err(
                    400,
                    "InvalidTagValue.Malformed",
                    format!("The specified Tag.{}.Value is not valid.", i + 1),
                ));
            }
        }
        // All or nothing: check every resource's quota before changing any.
        for id in &ids {
            let e = self.enis.get(id)?;
            let mut keys: Vec<&str> = e.tags().iter().map(|(k, _)| k.as_str()).collect();
            keys.extend(new.iter().map(|(k, _)| k.as_str()));
            keys.sort_unstable();
            keys.dedup();
            if keys.len() > MAX_TAGS_PER_RESOURCE {
                return Err(err(
                    403,
                    "OperationDenied.QuotaExceed",
                    "The quota of tags on resource is beyond permitted range.",
                ));
            }
        }
        for id in &ids {
            self.enis.get_mut(id)?.tag(&new);
        }
        Ok(json!({}))
    }

    /// UntagResources.
    pub(super) fn untag_resources(&mut self, p: &Params) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        resource_type(p)?;
        let ids = self.tag_targets(p, true)?;
        let keys = list(p, "TagKey", 20)?;
        let all = p.get("All").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if keys.is_empty() && !all {
            return Err(missing("TagKey.1"));
        }
        for id in &ids {
            self.enis.get_mut(id)?.untag(&keys, all);
        }
        Ok(json!({}))
    }

    /// ListTagResources.
    pub(super) fn list_tag_resources(&self, p: &Params) -> Result<Value, ApiError> {
        self.account.check_region(p)?;
        resource_type(p)?;
        let ids = list(p, "ResourceId", 50)?;
        let filter = tags(p)?;
        if ids.is_empty() && filter.is_empty() {
            return Err(missing("ResourceId.1"));
        }
        let mut out = Vec::new();
        for e in self.enis.live() {
            if !ids.is_empty() && !ids.iter().any(|i| i == e.id()) {
                continue;
            }
            // A Tag.N filter selects resources carrying every given key (and
            // value, when one is given); their tags are all listed.
            if !tags_match(&filter, e.tags()) {
                continue;
            }
            for (k, v) in e.tags() {
                out.push(
                    json!({"ResourceType": "eni", "ResourceId": e.id(), "TagKey": k, "TagValue": v}),
                );
            }
        }
        Ok(json!({"NextToken": "", "TagResources": {"TagResource": out}}))
    }
}
