//! The module graph of one crate, and its cycles.
//!
//! Nodes are the crate's file modules: the crate root (`src/lib.rs`) and
//! every module declared with `mod name;` that lives in `name.rs` or
//! `name/mod.rs`, at every nesting level. Inline `mod name { … }` blocks
//! count as part of the file that holds them. Items gated by `#[cfg(test)]`
//! (so `#[cfg(test)] mod tests;` with its `tests.rs`, and `mod tests { … }`
//! blocks) are left out, as are comments and literals (see [`crate::lex`]).
//!
//! A *reference* is a path in the module's code that starts with `crate::`,
//! `super::`, `self::` or the name of one of the module's own child modules,
//! in a `use` item (every leaf of a use tree) or inline in code
//! (`crate::pipeline::Foo::new()`). It is resolved the way rustc resolves
//! it, as far as a scanner can: through child modules, and through `use`
//! bindings of the modules on the way (so `crate::Timestamp`, re-exported by
//! `pub use types::*` at the root, reaches `types`). A reference gives an
//! edge from the module to every module it names on the way (its *trail*)
//! and to the module where the path ends. `super::X` is therefore an edge
//! child → parent; the parent's `mod child;` is not an edge, but its
//! `child::Thing` is.
//!
//! Cycles are reported per parent: for each module P, its child modules are
//! the nodes, and an edge from anything inside child `a` to anything inside
//! child `b` is an edge `a → b`. Every strongly connected component of two
//! or more children is a cycle. P's own file is not a node of that graph:
//! a folder whose `mod.rs` composes its children and whose children use the
//! types `mod.rs` defines is the ordinary shape of a Rust folder, not a
//! cycle. The crate root is the parent of the top-level modules, so the same
//! rule checks the top level.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::lex::{self, Source, Tok};

/// Index of a module in [`Crate::modules`].
pub type ModId = usize;

/// A path as written, split at `::`, relative to a module.
#[derive(Debug, Clone)]
struct Target {
    base: ModId,
    segs: Vec<String>,
}

/// One file module.
pub struct Module {
    /// `crate_name::a::b`.
    pub path: String,
    /// The file, relative to the checked tree's root.
    pub file: PathBuf,
    /// The enclosing module (`None` for the root).
    pub parent: Option<ModId>,
    /// Child file modules by name.
    pub children: BTreeMap<String, ModId>,
    /// The lexed file.
    pub src: Source,
    /// [`Source::code`] without `#[cfg(test)]` items.
    pub code: Vec<u8>,
    bindings: HashMap<String, Target>,
    globs: Vec<Target>,
    defines: BTreeSet<String>,
    refs: Vec<RawRef>,
}

struct RawRef {
    off: usize,
    text: String,
    target: Target,
}

/// A resolved reference.
#[derive(Debug, Clone)]
pub struct Ref {
    /// The referring module.
    pub from: ModId,
    /// 1-based line in `from`'s file.
    pub line: usize,
    /// The path as written (`crate::pipeline::Rx`).
    pub text: String,
    /// Modules named on the way, then the one where the path ends (last).
    pub trail: Vec<ModId>,
}

/// A crate's modules and resolved references.
pub struct Crate {
    /// The crate name used in module paths.
    pub name: String,
    /// All file modules; index 0 is the root.
    pub modules: Vec<Module>,
    /// Every reference of every module.
    pub refs: Vec<Ref>,
    /// `mod x;` declarations whose file was not found: (file, line, name).
    pub missing: Vec<(PathBuf, usize, String)>,
}

/// A cycle between sibling modules.
#[derive(Debug, Clone)]
pub struct Cycle {
    /// The common parent.
    pub parent: ModId,
    /// The children in the cycle, sorted by path.
    pub members: Vec<ModId>,
    /// One witness reference per sibling edge inside the cycle:
    /// (from child, to child, reference).
    pub edges: Vec<(ModId, ModId, Ref)>,
}

const DEFINING: &[&str] = &[
    "struct", "enum", "fn", "const", "static", "type", "trait", "union", "mod",
];

impl Crate {
    /// Reads the crate whose root file is `root_file` (e.g.
    /// `dataplane/src/lib.rs`), under the tree `tree`.
    pub fn load(tree: &Path, root_file: &Path, name: &str) -> std::io::Result<Crate> {
        let mut c = Crate {
            name: name.to_string(),
            modules: Vec::new(),
            refs: Vec::new(),
            missing: Vec::new(),
        };
        let dir = root_file.parent().unwrap_or(Path::new("")).to_path_buf();
        c.add(tree, root_file.to_path_buf(), dir, None, name.to_string())?;
        c.resolve_all();
        Ok(c)
    }

    fn add(
        &mut self,
        tree: &Path,
        file: PathBuf,
        child_dir: PathBuf,
        parent: Option<ModId>,
        path: String,
    ) -> std::io::Result<ModId> {
        let text = std::fs::read_to_string(tree.join(&file))?;
        let src = Source::new(text);
        let code = lex::without_tests(&src.code);
        let id = self.modules.len();
        self.modules.push(Module {
            path,
            file: file.clone(),
            parent,
            children: BTreeMap::new(),
            src,
            code,
            bindings: HashMap::new(),
            globs: Vec::new(),
            defines: BTreeSet::new(),
            refs: Vec::new(),
        });
        let toks = lex::tokens(&self.modules[id].code);
        // Child modules first: paths starting with a child's name need them.
        let mut decls = Vec::new();
        for (i, t) in toks.iter().enumerate() {
            if t.text == "mod" {
                if let (Some(n), Some(end)) = (toks.get(i + 1), toks.get(i + 2)) {
                    if n.is_ident() && end.text == ";" {
                        decls.push((n.text.clone(), t.off));
                    }
                }
            }
        }
        for (name, off) in decls {
            let flat = child_dir.join(format!("{name}.rs"));
            let folder = child_dir.join(&name).join("mod.rs");
            let (f, d) = if tree.join(&flat).is_file() {
                (flat, child_dir.join(&name))
            } else if tree.join(&folder).is_file() {
                (folder, child_dir.join(&name))
            } else {
                let line = self.modules[id].src.line(off);
                self.missing.push((file.clone(), line, name));
                continue;
            };
            let cpath = format!("{}::{name}", self.modules[id].path);
            let cid = self.add(tree, f, d, Some(id), cpath)?;
            self.modules[id].children.insert(name, cid);
        }
        self.scan(id, &toks);
        Ok(id)
    }

    /// Collects definitions, `use` bindings and references of module `id`.
    fn scan(&mut self, id: ModId, toks: &[Tok]) {
        let mut i = 0;
        let mut refs = Vec::new();
        while i < toks.len() {
            let t = &toks[i];
            if DEFINING.contains(&t.text.as_str()) {
                if let Some(n) = toks.get(i + 1).filter(|n| n.is_ident()) {
                    self.modules[id].defines.insert(n.text.clone());
                }
            } else if t.text == "macro_rules" && toks.get(i + 1).is_some_and(|b| b.text == "!") {
                if let Some(n) = toks.get(i + 2).filter(|n| n.is_ident()) {
                    self.modules[id].defines.insert(n.text.clone());
                }
            }
            if t.text == "use" {
                let mut j = i + 1;
                let mut leaves = Vec::new();
                use_tree(toks, &mut j, Vec::new(), &mut leaves);
                for leaf in leaves {
                    let Some(target) = self.anchor(id, &leaf.segs) else {
                        continue;
                    };
                    if leaf.glob {
                        self.modules[id].globs.push(target.clone());
                    } else if let Some(name) = &leaf.name {
                        self.modules[id]
                            .bindings
                            .insert(name.clone(), target.clone());
                    }
                    let text = leaf.segs.join("::") + if leaf.glob { "::*" } else { "" };
                    refs.push(RawRef {
                        off: leaf.off,
                        text,
                        target,
                    });
                }
                i = j.max(i + 1);
                continue;
            }
            // An inline path: not the middle of another path, not `$crate`.
            let starts_path = t.is_ident()
                && toks.get(i + 1).is_some_and(|n| n.text == "::")
                && !(i > 0 && (toks[i - 1].text == "::" || toks[i - 1].text == "$"));
            if starts_path {
                let first = t.text.as_str();
                let anchored = matches!(first, "crate" | "super" | "self")
                    || self.modules[id].children.contains_key(first);
                let mut segs = vec![t.text.clone()];
                let mut j = i + 1;
                while toks.get(j).is_some_and(|n| n.text == "::")
                    && toks.get(j + 1).is_some_and(|n| n.is_ident())
                {
                    segs.push(toks[j + 1].text.clone());
                    j += 2;
                }
                if anchored {
                    if let Some(target) = self.anchor(id, &segs) {
                        refs.push(RawRef {
                            off: t.off,
                            text: segs.join("::"),
                            target,
                        });
                    }
                }
                i = j;
                continue;
            }
            i += 1;
        }
        self.modules[id].refs = refs;
    }

    /// Where a path written in module `id` starts: `crate`, `super`,
    /// `self` or a child's name. `None` for other crates (`std::…`).
    fn anchor(&self, id: ModId, segs: &[String]) -> Option<Target> {
        let first = segs.first()?;
        match first.as_str() {
            "crate" => Some(Target {
                base: 0,
                segs: segs[1..].to_vec(),
            }),
            "self" => Some(Target {
                base: id,
                segs: segs[1..].to_vec(),
            }),
            "super" => {
                let mut base = id;
                let mut k = 0;
                while segs.get(k).is_some_and(|s| s == "super") {
                    base = self.modules[base].parent?;
                    k += 1;
                }
                Some(Target {
                    base,
                    segs: segs[k..].to_vec(),
                })
            }
            c if self.modules[id].children.contains_key(c) => Some(Target {
                base: id,
                segs: segs.to_vec(),
            }),
            _ => None,
        }
    }

    /// Follows `segs` from `base`; pushes every module reached to `trail`.
    fn walk(&self, base: ModId, segs: &[String], trail: &mut Vec<ModId>, depth: usize) {
        let mut cur = base;
        trail.push(cur);
        if depth > 6 {
            return;
        }
        for (k, s) in segs.iter().enumerate() {
            let m = &self.modules[cur];
            if s == "self" {
                continue;
            }
            if s == "super" {
                if let Some(p) = m.parent {
                    cur = p;
                    trail.push(cur);
                }
                continue;
            }
            if let Some(&c) = m.children.get(s) {
                cur = c;
                trail.push(cur);
                continue;
            }
            if m.defines.contains(s) {
                return;
            }
            if let Some(b) = m.bindings.get(s) {
                let mut rest = b.segs.clone();
                rest.extend_from_slice(&segs[k + 1..]);
                self.walk(b.base, &rest, trail, depth + 1);
                return;
            }
            for g in &m.globs {
                let mut gt = Vec::new();
                self.walk(g.base, &g.segs, &mut gt, depth + 1);
                let Some(&gm) = gt.last() else { continue };
                let gmod = &self.modules[gm];
                if gm != cur
                    && (gmod.defines.contains(s)
                        || gmod.children.contains_key(s)
                        || gmod.bindings.contains_key(s))
                {
                    trail.extend(gt);
                    let mut sub = Vec::new();
                    self.walk(gm, &segs[k..], &mut sub, depth + 1);
                    trail.extend(sub);
                    return;
                }
            }
            return;
        }
    }

    fn resolve_all(&mut self) {
        let mut out = Vec::new();
        for (id, m) in self.modules.iter().enumerate() {
            for r in &m.refs {
                let mut trail = Vec::new();
                self.walk(r.target.base, &r.target.segs, &mut trail, 0);
                let mut seen = BTreeSet::new();
                trail.retain(|t| seen.insert(*t));
                // The last module reached is where the path ends.
                if let Some(last) = self.last_of(&r.target) {
                    trail.retain(|t| *t != last);
                    trail.push(last);
                }
                out.push(Ref {
                    from: id,
                    line: m.src.line(r.off),
                    text: r.text.clone(),
                    trail,
                });
            }
        }
        self.refs = out;
    }

    fn last_of(&self, t: &Target) -> Option<ModId> {
        let mut trail = Vec::new();
        self.walk(t.base, &t.segs, &mut trail, 0);
        trail.last().copied()
    }

    /// Whether `a` is `b` or inside it.
    pub fn within(&self, mut a: ModId, b: ModId) -> bool {
        loop {
            if a == b {
                return true;
            }
            match self.modules[a].parent {
                Some(p) => a = p,
                None => return false,
            }
        }
    }

    /// The child of `parent` that holds `m`, if `m` is strictly inside it.
    fn child_holding(&self, parent: ModId, mut m: ModId) -> Option<ModId> {
        loop {
            let p = self.modules[m].parent?;
            if p == parent {
                return Some(m);
            }
            m = p;
        }
    }

    /// The module at `crate_name::a::b`, if any.
    pub fn find(&self, path: &str) -> Option<ModId> {
        self.modules.iter().position(|m| m.path == path)
    }

    /// Every cycle between sibling modules, parents in tree order.
    pub fn cycles(&self) -> Vec<Cycle> {
        let mut out = Vec::new();
        for parent in 0..self.modules.len() {
            let kids: Vec<ModId> = self.modules[parent].children.values().copied().collect();
            if kids.len() < 2 {
                continue;
            }
            let mut adj: BTreeMap<ModId, BTreeMap<ModId, Ref>> = BTreeMap::new();
            for r in &self.refs {
                let Some(a) = self.child_holding(parent, r.from) else {
                    continue;
                };
                for &t in &r.trail {
                    let Some(b) = self.child_holding(parent, t) else {
                        continue;
                    };
                    if a != b {
                        adj.entry(a)
                            .or_default()
                            .entry(b)
                            .or_insert_with(|| r.clone());
                    }
                }
            }
            for scc in tarjan(&kids, &adj) {
                if scc.len() < 2 {
                    continue;
                }
                let set: BTreeSet<ModId> = scc.iter().copied().collect();
                let mut edges = Vec::new();
                for &a in &set {
                    for (&b, r) in adj.get(&a).into_iter().flatten() {
                        if set.contains(&b) {
                            edges.push((a, b, r.clone()));
                        }
                    }
                }
                let mut members: Vec<ModId> = set.into_iter().collect();
                members.sort_by(|x, y| self.modules[*x].path.cmp(&self.modules[*y].path));
                out.push(Cycle {
                    parent,
                    members,
                    edges,
                });
            }
        }
        out
    }
}

/// Strongly connected components (Tarjan), over `nodes` and `adj`.
fn tarjan(nodes: &[ModId], adj: &BTreeMap<ModId, BTreeMap<ModId, Ref>>) -> Vec<Vec<ModId>> {
    struct St<'a> {
        adj: &'a BTreeMap<ModId, BTreeMap<ModId, Ref>>,
        index: HashMap<ModId, usize>,
        low: HashMap<ModId, usize>,
        stack: Vec<ModId>,
        on: BTreeSet<ModId>,
        next: usize,
        out: Vec<Vec<ModId>>,
    }
    fn visit(s: &mut St, v: ModId) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        let succ: Vec<ModId> = s
            .adj
            .get(&v)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        for w in succ {
            if !s.index.contains_key(&w) {
                visit(s, w);
                let lw = s.low[&w];
                let lv = s.low.get_mut(&v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(&w) {
                let iw = s.index[&w];
                let lv = s.low.get_mut(&v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[&v] == s.index[&v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(&w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let mut s = St {
        adj,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for &n in nodes {
        if !s.index.contains_key(&n) {
            visit(&mut s, n);
        }
    }
    s.out
}

/// One leaf of a use tree.
#[derive(Debug)]
pub struct UseLeaf {
    /// Offset of the leaf's first token (or of the tree's first segment).
    pub off: usize,
    /// The full path, prefix included; for `a::{self}` it is `a`.
    pub segs: Vec<String>,
    /// The name bound (alias, last segment), `None` for `as _` and globs.
    pub name: Option<String>,
    /// `a::*`.
    pub glob: bool,
}

/// Parses the use tree starting at `toks[*j]` up to and including its `;`
/// (or the closing `}` of a group); pushes one [`UseLeaf`] per leaf.
pub fn use_tree(toks: &[Tok], j: &mut usize, prefix: Vec<String>, out: &mut Vec<UseLeaf>) {
    let mut segs = prefix;
    let mut first_off = None;
    while let Some(t) = toks.get(*j) {
        first_off.get_or_insert(t.off);
        match t.text.as_str() {
            "::" => {
                if segs.is_empty() {
                    // `use ::std::…`: another crate.
                    segs.push("::".into());
                }
                *j += 1;
            }
            "*" => {
                *j += 1;
                out.push(UseLeaf {
                    off: first_off.unwrap_or(t.off),
                    segs,
                    name: None,
                    glob: true,
                });
                return;
            }
            "{" => {
                *j += 1;
                loop {
                    match toks.get(*j).map(|t| t.text.as_str()) {
                        None => return,
                        Some("}") => {
                            *j += 1;
                            return;
                        }
                        Some(",") => *j += 1,
                        Some(_) => {
                            let before = *j;
                            use_tree(toks, j, segs.clone(), out);
                            if *j == before {
                                *j += 1;
                            }
                        }
                    }
                }
            }
            ";" | "," | "}" => return,
            _ if t.is_ident() => {
                let s = t.text.clone();
                *j += 1;
                if toks.get(*j).is_some_and(|n| n.text == "::") {
                    segs.push(s);
                    *j += 1;
                    continue;
                }
                let mut name = if s == "self" {
                    segs.last().cloned()
                } else {
                    Some(s.clone())
                };
                if s != "self" {
                    segs.push(s);
                }
                if toks.get(*j).is_some_and(|n| n.text == "as") {
                    let alias = toks.get(*j + 1).map(|n| n.text.clone());
                    *j += 2;
                    name = alias.filter(|a| a != "_");
                }
                out.push(UseLeaf {
                    off: first_off.unwrap_or(t.off),
                    segs,
                    name,
                    glob: false,
                });
                return;
            }
            _ => {
                // Not a use tree after all (should not happen in valid code).
                *j += 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(src: &str) -> Vec<(String, Option<String>, bool)> {
        let toks = lex::tokens(src.as_bytes());
        let mut j = 1;
        let mut out = Vec::new();
        use_tree(&toks, &mut j, Vec::new(), &mut out);
        out.into_iter()
            .map(|l| (l.segs.join("::"), l.name, l.glob))
            .collect()
    }

    #[test]
    fn use_trees() {
        assert_eq!(
            leaves("use crate::{a::{B, c as D}, e::*, f::{self}};"),
            vec![
                ("crate::a::B".into(), Some("B".into()), false),
                ("crate::a::c".into(), Some("D".into()), false),
                ("crate::e".into(), None, true),
                ("crate::f".into(), Some("f".into()), false),
            ]
        );
        assert_eq!(
            leaves("use super::x as _;"),
            vec![("super::x".into(), None, false)]
        );
    }
}
