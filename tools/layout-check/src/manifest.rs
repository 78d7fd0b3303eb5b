//! Just enough of `Cargo.toml` for the checks: the workspace member list,
//! a package's name, its dependencies (name, `package =`, `path =`, table,
//! line) and its `[lib]` / `[[bin]]` paths. Line-based; the manifests of
//! this workspace are plain (one key per line, inline tables on one line).

/// One dependency entry.
#[derive(Debug, Clone)]
pub struct Dep {
    /// The key (`dpdk-sys`, or the rename).
    pub key: String,
    /// The package name (`package = "…"`, else the key).
    pub package: String,
    /// `path = "…"`, if any.
    pub path: Option<String>,
    /// The table: `dependencies`, `dev-dependencies`, `build-dependencies`,
    /// or `target.….dependencies`.
    pub table: String,
    /// 1-based line of the entry.
    pub line: usize,
}

impl Dep {
    /// Whether this is a normal (not dev, not build) dependency.
    pub fn is_normal(&self) -> bool {
        self.table == "dependencies"
            || (self.table.starts_with("target.") && self.table.ends_with(".dependencies"))
    }
}

/// A parsed package manifest.
#[derive(Debug, Default)]
pub struct Manifest {
    /// `[package] name`.
    pub name: String,
    /// Every dependency of every table.
    pub deps: Vec<Dep>,
    /// `path =` of `[lib]` and every `[[bin]]`.
    pub target_paths: Vec<String>,
}

fn quoted(v: &str) -> Option<String> {
    let v = v.trim();
    let v = v.strip_prefix('"')?;
    Some(v[..v.find('"')?].to_string())
}

/// The value of `key = "…"` inside an inline table `{ …, key = "…", … }`.
fn inline(v: &str, key: &str) -> Option<String> {
    let body = v.trim().strip_prefix('{')?;
    for part in body.trim_end_matches('}').split(',') {
        if let Some((k, val)) = part.split_once('=') {
            if k.trim() == key {
                return quoted(val);
            }
        }
    }
    None
}

fn strip_comment(l: &str) -> &str {
    // No `#` inside the strings of these manifests' dependency lines.
    match l.find(" #") {
        Some(p) => &l[..p],
        None if l.trim_start().starts_with('#') => "",
        None => l,
    }
}

/// Parses a package manifest.
pub fn parse(text: &str) -> Manifest {
    let mut m = Manifest::default();
    let mut section = String::new();
    // `[dependencies.foo]` tables: the dep being filled in.
    let mut open_dep: Option<usize> = None;
    for (n, raw) in text.lines().enumerate() {
        let l = strip_comment(raw).trim();
        if l.is_empty() {
            continue;
        }
        if l.starts_with('[') {
            section = l.trim_matches(|c| c == '[' || c == ']').trim().to_string();
            open_dep = None;
            for t in ["dependencies", "dev-dependencies", "build-dependencies"] {
                if let Some(name) = section.strip_prefix(&format!("{t}.")) {
                    m.deps.push(Dep {
                        key: name.into(),
                        package: name.into(),
                        path: None,
                        table: t.into(),
                        line: n + 1,
                    });
                    open_dep = Some(m.deps.len() - 1);
                }
            }
            continue;
        }
        let Some((k, v)) = l.split_once('=') else {
            continue;
        };
        let k = k.trim().trim_matches('"');
        if let Some(d) = open_dep {
            match k {
                "package" => m.deps[d].package = quoted(v).unwrap_or_default(),
                "path" => m.deps[d].path = quoted(v),
                _ => {}
            }
            continue;
        }
        let is_dep_table = matches!(
            section.as_str(),
            "dependencies" | "dev-dependencies" | "build-dependencies"
        ) || (section.starts_with("target.")
            && section.ends_with("dependencies"));
        if is_dep_table {
            // `log.workspace = true` is the dependency `log`.
            let k = k.split('.').next().unwrap_or(k);
            let package = inline(v, "package").unwrap_or_else(|| k.to_string());
            m.deps.push(Dep {
                key: k.into(),
                package,
                path: inline(v, "path"),
                table: section.clone(),
                line: n + 1,
            });
        } else if section == "package" && k == "name" {
            m.name = quoted(v).unwrap_or_default();
        } else if (section == "lib" || section == "bin") && k == "path" {
            m.target_paths.extend(quoted(v));
        }
    }
    m
}

/// The `members` of `[workspace]` in the root manifest.
pub fn workspace_members(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut in_members = false;
    for raw in text.lines() {
        let l = strip_comment(raw).trim();
        if l.starts_with('[') && !in_members {
            section = l.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        let mut rest = l;
        if !in_members {
            match l.split_once('=') {
                Some((k, v)) if section == "workspace" && k.trim() == "members" => {
                    in_members = true;
                    rest = v;
                }
                _ => continue,
            }
        }
        let mut s = rest;
        while let Some(a) = s.find('"') {
            let Some(b) = s[a + 1..].find('"') else { break };
            out.push(s[a + 1..a + 1 + b].to_string());
            s = &s[a + b + 2..];
        }
        if rest.contains(']') {
            in_members = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_deps() {
        let ws = "[workspace]\nresolver = \"2\"\nmembers = [\"a\", \"b\",\n  \"tools/c\"]\n[workspace.package]\nedition = \"2021\"\n";
        assert_eq!(workspace_members(ws), ["a", "b", "tools/c"]);
        let m = parse(
            "[package]\nname = \"clusterfw\"\n[dependencies]\ndpdk = { package = \"dpdk-sys\", path = \"../dpdk-bindings\" }\nlog.workspace = true\n[dev-dependencies.x]\npath = \"../x\"\n[[bin]]\nname = \"b\"\npath = \"src/b.rs\"\n",
        );
        assert_eq!(m.name, "clusterfw");
        assert_eq!(m.deps[0].package, "dpdk-sys");
        assert_eq!(m.deps[0].path.as_deref(), Some("../dpdk-bindings"));
        assert_eq!(m.deps[0].line, 4);
        assert_eq!(m.deps[1].key, "log");
        assert_eq!(
            (
                m.deps[2].key.as_str(),
                m.deps[2].path.as_deref(),
                m.deps[2].is_normal()
            ),
            ("x", Some("../x"), false)
        );
        assert_eq!(m.target_paths, ["src/b.rs"]);
    }
}
