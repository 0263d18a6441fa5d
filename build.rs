// Build script.
// - `sqlx::migrate!` embeds migrations/ at compile time; without the
//   rerun line, a new migration file alone would not rebuild the binary that
//   embeds it (sqlx's documented build script for the macro).
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
}
