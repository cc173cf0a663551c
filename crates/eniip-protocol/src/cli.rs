//! The command lines of the four binaries, lexed by `lexopt` and ended in
//! one way: `-h`/`--help` prints the program's help and `-V`/`--version`
//! its version (exit 0), a flag takes its value as the next argument or
//! after `=`, and a usage error names the flag or argument and exits 2
//! ([`settle`]). Each binary matches its own flags; what they share is
//! here.

use std::ffi::OsString;
use std::fmt;
use std::process::ExitCode;
use std::str::FromStr;

pub use lexopt::{Arg, Parser, ValueExt};

/// The exit status of a usage error (SPEC section 2).
pub const USAGE_EXIT: u8 = 2;

/// What a command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked<T> {
    /// `-h`, `--help`
    Help,
    /// `-V`, `--version`
    Version,
    /// Anything else: the program's own arguments.
    Run(T),
}

/// A bad command line, in words that name the flag or argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(String);

impl UsageError {
    /// A usage error saying `msg`.
    pub fn new(msg: impl Into<String>) -> UsageError {
        UsageError(msg.into())
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (try --help)", self.0)
    }
}

impl std::error::Error for UsageError {}

fn text(v: &OsString) -> String {
    v.to_string_lossy().into_owned()
}

impl From<lexopt::Error> for UsageError {
    fn from(e: lexopt::Error) -> UsageError {
        use lexopt::Error as E;
        UsageError(match e {
            E::MissingValue {
                option: Some(flag), ..
            } => format!("{flag} needs a value"),
            E::MissingValue { option: None } => "a value is missing".into(),
            E::UnexpectedOption(flag) => format!("unknown option {flag}"),
            E::UnexpectedArgument(v) => format!("unexpected argument {}", text(&v)),
            E::UnexpectedValue { option, .. } => format!("{option} takes no value"),
            E::NonUnicodeValue(v) => format!("{v:?} is not UTF-8"),
            other => other.to_string(),
        })
    }
}

/// A lexer over `args` (the arguments after the program's name).
pub fn parser<I: IntoIterator<Item = String>>(args: I) -> Parser {
    Parser::from_args(args)
}

/// What the shared flags ask for: `Some` for `-h`/`--help` and
/// `-V`/`--version`, which end the command line wherever they stand.
pub fn shared<T>(arg: &Arg<'_>) -> Option<Asked<T>> {
    match arg {
        Arg::Short('h') | Arg::Long("help") => Some(Asked::Help),
        Arg::Short('V') | Arg::Long("version") => Some(Asked::Version),
        _ => None,
    }
}

/// The value of `flag` (the next argument, or after `=`): text that is
/// not empty.
pub fn value(p: &mut Parser, flag: &str) -> Result<String, UsageError> {
    let v = p.value()?;
    let v = v
        .into_string()
        .map_err(|v| UsageError(format!("{flag}: {v:?} is not UTF-8")))?;
    if v.is_empty() {
        return Err(UsageError(format!("{flag} needs a value")));
    }
    Ok(v)
}

/// The value of `flag` read as a `T`; `what` says what it must be
/// ("a number").
pub fn parsed<T: FromStr>(p: &mut Parser, flag: &str, what: &str) -> Result<T, UsageError> {
    let v = value(p, flag)?;
    v.parse()
        .map_err(|_| UsageError(format!("{flag}: {v:?} is not {what}")))
}

/// Ends a binary's command line: the run's arguments, or (as `Err`, for
/// `main` to return) exit 0 after the help or version, exit 2 after the
/// usage error, each printed the one way every binary prints it.
pub fn settle<T>(
    program: &str,
    help: &str,
    parsed: Result<Asked<T>, UsageError>,
) -> Result<T, ExitCode> {
    match parsed {
        Ok(Asked::Run(t)) => Ok(t),
        Ok(Asked::Help) => {
            print!("{help}");
            Err(ExitCode::SUCCESS)
        }
        Ok(Asked::Version) => {
            println!("{program} {}", env!("CARGO_PKG_VERSION"));
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{program}: {e}");
            Err(ExitCode::from(USAGE_EXIT))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--name`'s value, whether `--on` was given, the positional words.
    type Line = (Option<String>, bool, Vec<String>);

    /// A command line of one valued flag `--name`, one switch `--on` and
    /// positional words.
    fn lex(args: &[&str]) -> Result<Asked<Line>, UsageError> {
        let mut p = parser(args.iter().map(|s| s.to_string()));
        let (mut name, mut on, mut words) = (None, false, Vec::new());
        while let Some(arg) = p.next()? {
            if let Some(asked) = shared(&arg) {
                return Ok(asked);
            }
            match arg {
                Arg::Long("name") => name = Some(value(&mut p, "--name")?),
                Arg::Long("on") => on = true,
                Arg::Value(v) => words.push(v.string()?),
                _ => return Err(arg.unexpected().into()),
            }
        }
        Ok(Asked::Run((name, on, words)))
    }

    #[test]
    fn flags_take_values_either_way_and_help_and_version_win() {
        let run = |args: &[&str]| match lex(args).unwrap() {
            Asked::Run(r) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            run(&["--name", "a", "w"]),
            (Some("a".into()), false, vec!["w".into()])
        );
        assert_eq!(
            run(&["--name=a=b", "--on"]),
            (Some("a=b".into()), true, vec![])
        );
        assert_eq!(
            run(&["w", "--", "--on"]),
            (None, false, vec!["w".into(), "--on".into()])
        );
        for (args, asked) in [
            (&["-h"][..], Asked::Help),
            (&["--help"][..], Asked::Help),
            (&["-V"][..], Asked::Version),
            (&["--on", "--version", "--bogus"][..], Asked::Version),
        ] {
            assert_eq!(lex(args).unwrap(), asked, "{args:?}");
        }
    }

    #[test]
    fn usage_errors_name_the_flag() {
        for (args, says) in [
            (&["--name"][..], "--name needs a value"),
            (&["--name="][..], "--name needs a value"),
            (&["--bogus"][..], "unknown option --bogus"),
            (&["-x"][..], "unknown option -x"),
            (&["--on=yes"][..], "--on takes no value"),
        ] {
            let e = lex(args).unwrap_err();
            assert_eq!(e.to_string(), format!("{says} (try --help)"), "{args:?}");
        }
        let mut p = parser(["--n".to_string(), "x1".to_string()]);
        p.next().unwrap();
        let e = parsed::<u32>(&mut p, "--n", "a number").unwrap_err();
        assert_eq!(e.to_string(), "--n: \"x1\" is not a number (try --help)");
    }
}
