// `sqlx::migrate!` embeds migrations/ at compile time; without this, a new
// migration file alone would not rebuild the binary that embeds it
// (sqlx's documented build script for the macro).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
