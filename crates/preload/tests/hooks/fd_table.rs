//! The fd table follows the descriptor calls: see `fd_table.c` for each case.

use crate::{compile, host_default_cc, pairs, preloaded, profile_file, run, text};

const SOURCE: &str = include_str!("fd_table.c");
const ROUNDS: u32 = 20;

#[test]
fn fd_table_follows_dup_dup2_dup3_close_range_and_closefrom() {
    let dir = tempfile::tempdir().unwrap();
    let program = compile(dir.path(), "fd_table", SOURCE, &[]);
    let profile = profile_file(dir.path());
    let default_cc = host_default_cc();
    let out = run(preloaded(
        &program,
        &[&ROUNDS.to_string()],
        &[("TCPTAIL_PROFILE", profile.to_str().unwrap())],
    ));
    let stdout = text(&out.stdout);
    let results = pairs(&stdout);
    let value = |name: &str| -> &str {
        let found = results.iter().find(|(k, _)| k == name);
        &found.unwrap_or_else(|| panic!("no {name} line in:\n{stdout}")).1
    };
    let rounds = |name: &str| -> u32 { value(name).parse().expect("a count") };

    // The measure can tell a tracked socket from an untracked one.
    assert_eq!(rounds("direct"), ROUNDS, "a tracked socket re-arms every round:\n{stdout}");
    assert!(rounds("untracked") < ROUNDS, "an untracked socket must fall short:\n{stdout}");
    for copy in ["dup", "dup2", "dup3", "cloexec"] {
        assert_eq!(rounds(copy), ROUNDS, "{copy}: the copy must stay tracked:\n{stdout}");
    }
    for reused in ["dup2-over-tracked", "close_range", "closefrom"] {
        assert_eq!(
            value(reused),
            "reno",
            "{reused}: a number reused by an unseen socket must get the profile at connect \
             (the host default is {default_cc}):\n{stdout}"
        );
    }
}
