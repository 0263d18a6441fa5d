#!/usr/bin/env python3
"""Checks that the Dockerfile's build stages copy everything the crate needs.

No container engine runs in CI, so this replays the Dockerfile's Rust stages
on a scratch directory: each `COPY` (from the build context, minus
`.dockerignore`) puts the same files at the same place, `sh <script>` runs
as written, `rm -rf` of sources is applied, and each `cargo build` becomes a
`cargo check` with the same package and binary arguments (the dev profile,
sharing the repository's target directory, so it costs one check of the
crate). A missing COPY fails the same way `docker build` would.

Usage: check-docker-context.py [DOCKERFILE]     (default: ./Dockerfile)
       check-docker-context.py --self-test      also proves it fails when a
                                                COPY the build needs is removed
"""
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def instructions(text):
    """(keyword, argument) pairs, continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        if not cur and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            kw, _, arg = cur.strip().partition(" ")
            out.append((kw.upper(), arg.strip()))
        cur = ""
    return out


def ignored_patterns():
    path = os.path.join(ROOT, ".dockerignore")
    if not os.path.exists(path):
        return []
    return [
        p.strip().rstrip("/")
        for p in open(path)
        if p.strip() and not p.startswith("#")
    ]


def is_ignored(rel, patterns):
    parts = rel.split("/")
    for p in patterns:
        for i in range(1, len(parts) + 1):
            if fnmatch.fnmatch("/".join(parts[:i]), p):
                return True
    return False


def copy_from_context(srcs, dest, workdir, patterns):
    """Docker's COPY: a directory's contents into dest, files into dest/ or as dest."""
    target = os.path.join(workdir, dest)
    into_dir = dest.endswith("/") or len(srcs) > 1
    for src in srcs:
        full = os.path.join(ROOT, src)
        if not os.path.exists(full) or is_ignored(src.rstrip("/"), patterns):
            raise SystemExit(f"COPY {src}: not in the build context")
        if os.path.isdir(full):
            for dirpath, dirnames, filenames in os.walk(full):
                rel_dir = os.path.relpath(dirpath, full)
                for name in filenames:
                    rel_src = os.path.relpath(os.path.join(dirpath, name), ROOT)
                    if is_ignored(rel_src, patterns):
                        continue
                    out = os.path.normpath(os.path.join(target, rel_dir, name))
                    os.makedirs(os.path.dirname(out), exist_ok=True)
                    shutil.copy(os.path.join(dirpath, name), out)
        else:
            out = os.path.join(target, os.path.basename(src)) if into_dir else target
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copy(full, out)


def cargo_check(args, workdir):
    """`cargo build ARGS` as a `cargo check` with the same selection."""
    keep, skip_next = [], False
    for i, a in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        if a == "--release":
            continue
        keep.append(a)
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
    cmd = ["cargo", "check", "--quiet", *keep]
    print(f"  $ {' '.join(cmd)}", flush=True)
    return subprocess.run(cmd, cwd=workdir, env=env).returncode


def run_step(step, workdir):
    words = shlex.split(step)
    if not words:
        return 0
    if words[0] == "sh" and len(words) >= 2:
        print(f"  $ {step}", flush=True)
        return subprocess.run(words, cwd=workdir).returncode
    if words[:2] == ["cargo", "build"]:
        return cargo_check(words[2:], workdir)
    if words[:2] == ["rm", "-rf"]:
        for p in words[2:]:
            if p.startswith("target/") or p.startswith("/"):
                continue  # build products; nothing of them is simulated
            shutil.rmtree(os.path.join(workdir, p), ignore_errors=True)
        return 0
    if words[0] == "strip":
        return 0
    if words[0] in ("mkdir", "echo", "touch", ":", "cp", "mv"):
        # Plain file-system steps, run as written inside the scratch tree.
        print(f"  $ {step}", flush=True)
        return subprocess.run(["sh", "-c", step], cwd=workdir).returncode
    raise SystemExit(f"RUN step not understood by this check: {step!r}")


def check(dockerfile_text):
    """0 when every Rust stage builds from what it copies."""
    patterns = ignored_patterns()
    stages, current = {}, None
    for kw, arg in instructions(dockerfile_text):
        if kw == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", arg, re.I)
            base, name = m.group(1), m.group(2) or f"stage{len(stages)}"
            current = {"name": name, "base": base, "steps": []}
            stages[name] = current
        elif current is not None:
            current["steps"].append((kw, arg))

    def is_rust(stage):
        base = stage["base"]
        return base.startswith("rust:") or (base in stages and is_rust(stages[base]))

    rust = [s for s in stages.values() if is_rust(s)]
    if not rust:
        raise SystemExit("no stage builds from a rust image")
    with tempfile.TemporaryDirectory(prefix="hg-docker-context-") as tmp:
        trees = {}
        for stage in rust:
            tree = os.path.join(tmp, stage["name"])
            base = stage["base"]
            if base in trees:
                shutil.copytree(trees[base], tree, symlinks=True)
            else:
                os.makedirs(tree)
            workdir = tree
            print(f"stage {stage['name']}", flush=True)
            for kw, arg in stage["steps"]:
                if kw == "WORKDIR":
                    workdir = tree  # the stages here use one WORKDIR; paths are relative to it
                elif kw == "COPY":
                    words = shlex.split(arg)
                    if any(w.startswith("--from") for w in words):
                        continue
                    words = [w for w in words if not w.startswith("--")]
                    copy_from_context(words[:-1], words[-1], workdir, patterns)
                elif kw == "RUN":
                    for step in arg.split("&&"):
                        if run_step(step.strip(), workdir) != 0:
                            print(f"FAILED in stage {stage['name']}: {step.strip()}")
                            return 1
            trees[stage["name"]] = tree
    return 0


def self_test(text):
    """The real file passes; removing a COPY the build needs fails."""
    if check(text) != 0:
        return 1
    needed = [l for l in text.splitlines() if l.startswith("COPY ") and "--from" not in l
              and "docker.toml" not in l]
    failures = 0
    for line in needed:
        print(f"\nwithout: {line}")
        try:
            code = check(text.replace(line + "\n", "", 1))
        except SystemExit as e:
            print(f"  refused: {e}")
            code = 1
        if code == 0:
            print(f"SELF-TEST FAILED: the build passed without `{line}`")
            failures += 1
    return 1 if failures else 0


def main():
    args = sys.argv[1:]
    if args[:1] == ["--self-test"]:
        sys.exit(self_test(open(os.path.join(ROOT, "Dockerfile")).read()))
    path = args[0] if args else os.path.join(ROOT, "Dockerfile")
    code = check(open(path).read())
    print("docker context: ok" if code == 0 else "docker context: FAILED")
    sys.exit(code)


if __name__ == "__main__":
    main()
