// Build script.
// - `sqlx::migrate!` embeds migrations/ at compile time; without the
//   rerun line, a new migration file alone would not rebuild the binary that
//   embeds it (sqlx's documented build script for the macro).
// - `HOOKGATE_COMMIT` (read by `hookgate_build_info`): the variable of the
//   same name when the build sets it (a Docker build has no .git), else
//   git's HEAD, else "unknown".
// - Every `providers/*.toml` is compiled in: this writes the list that
//   `verify::registry` includes, so a new provider is one new file.
use std::fmt::Write as _;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=providers");
    // Read at run time, not baked in with env!: the compiled script may be
    // reused for a copy of the tree elsewhere (scripts/check-docker-context.py).
    let root = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = std::path::Path::new(&root).join("providers");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("providers/ is readable")
        .map(|e| e.expect("providers/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut out = String::from("&[\n");
    for n in &names {
        // The file's own path, so cargo tracks each file too.
        println!("cargo:rerun-if-changed=providers/{n}.toml");
        writeln!(
            out,
            "    ({n:?}, include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/providers/{n}.toml\"))),"
        )
        .unwrap();
    }
    out.push(']');
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("providers.rs");
    std::fs::write(dest, out).unwrap();
    let commit = std::env::var("HOOKGATE_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git_head(&root))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rerun-if-env-changed=HOOKGATE_COMMIT");
    println!("cargo:rustc-env=HOOKGATE_COMMIT={}", commit.trim());
}

/// `git`'s output in `dir`, when git is there and answers.
fn git(dir: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// HEAD's short hash; the files that move with it are watched, so a new
/// commit re-runs this script.
fn git_head(dir: &str) -> Option<String> {
    let head = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = vec!["HEAD".to_owned()];
    watched.extend(git(dir, &["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(
            dir,
            &["rev-parse", "--path-format=absolute", "--git-path", &name],
        ) && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(head)
}
