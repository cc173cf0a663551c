//! The container's network namespace (`CNI_NETNS`), checked before
//! anything is asked or built: a namespace file, and not the plugin's own.

use std::fs::File;

use super::netns;
use super::spec::{code, CniError, Env};

/// The container's netns (`CNI_NETNS`), open, checked to be a network
/// namespace other than the plugin's own (a pod interface made in the
/// node's namespace would take over its default route). `Ok(None)`:
/// nothing is there. A bad one is CNI error 4.
pub(crate) fn open_container(env: &Env) -> Result<Option<File>, CniError> {
    let Some(path) = &env.netns else {
        return Ok(None);
    };
    let bad = |what: String| CniError::new(code::INVALID_ENV, what);
    let f = match netns::open(path) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(
                bad(format!("cannot open CNI_NETNS {}", path.display())).details(e.to_string())
            )
        }
    };
    let id = eniip_util::netns_identity::identity_of(&f, path)
        .map_err(|e| bad(format!("CNI_NETNS {}: {e}", path.display())))?;
    let own = eniip_util::netns_identity::own()
        .map_err(|e| CniError::new(code::IO, format!("cannot read the plugin's own netns: {e}")))?;
    if id == own {
        return Err(bad(format!(
            "CNI_NETNS {} is the namespace eniip-cni runs in, not a container's",
            path.display()
        )));
    }
    Ok(Some(f))
}
