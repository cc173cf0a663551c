//! The man pages (man/) as the documentation tests read them: a page's
//! source with its escapes resolved, or as plain words, and one `.SH`
//! section of it.

// `pub` here means "for the tests", not an API.
#![allow(unreachable_pub)]

/// Where page `name` (`eniipd.8`) is.
pub fn path(name: &str) -> String {
    format!("{}/man/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A page's source with `\-` and `\&` resolved; requests and font
/// changes kept.
pub fn source(name: &str) -> String {
    let path = path(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .replace("\\-", "-")
        .replace("\\&", "")
}

/// A page as plain words: escapes and font changes removed.
pub fn words(name: &str) -> String {
    let mut out = source(name).replace("\\(em", "--").replace("\\e", "\\");
    for f in ["\\fB", "\\fI", "\\fR", "\\fP"] {
        out = out.replace(f, "");
    }
    out
}

/// The text of one `.SH` section.
pub fn section(page: &str, title: &str) -> String {
    let start = page
        .find(&format!(".SH {title}\n"))
        .unwrap_or_else(|| panic!("no section {title}"));
    let rest = &page[start + 4..];
    let end = rest.find("\n.SH ").map_or(rest.len(), |i| i + 1);
    rest[..end].to_string()
}
