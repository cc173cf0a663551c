//! The one skip policy of the tests, shared by the library's unit tests
//! and the integration tests (which reach it as
//! `eniip_util::testing`): a test that cannot run here (no root, a tool
//! missing) says SKIPPED loudly and passes, except under CI, where every
//! test must run and a skip fails.

/// The variable that says the tests run under CI, when it is `1`.
pub const CI_VAR: &str = "ENIIPD_CI";

/// True under CI (`ENIIPD_CI=1`): a skip is a failure.
pub fn under_ci() -> bool {
    std::env::var(CI_VAR).as_deref() == Ok("1")
}

/// Skips a test that cannot run here: `why` names the test and what it
/// needs. Says so loudly; panics instead under CI ([`under_ci`]).
pub fn skip(why: &str) {
    let msg = format!("SKIPPED: {why}");
    if under_ci() {
        panic!("{msg} ({CI_VAR}=1: a skip is a failure)");
    }
    eprintln!("\n*** {msg} ***\n");
}
