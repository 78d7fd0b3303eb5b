//! Map a field path to its position in the YAML source.
//!
//! `serde_yaml` reports positions only for errors it finds itself. Errors
//! found after deserialization (duplicate names, a route whose next hop is
//! not connected, ...) need the position of a value given its path, so this
//! module replays the source through `yaml-rust2`'s event parser and keeps a
//! small tree of nodes with their start positions.
//!
//! Invariants: building the tree never fails and never recurses (an explicit
//! stack), so any input is safe; a parse error simply ends the tree where it
//! happened. [`Locator::locate`] always returns a position with line and
//! column >= 1: the value at the path if it exists, otherwise the deepest
//! existing ancestor, otherwise the start of the document. Only the first
//! document is indexed (the schema accepts exactly one).
//!
//! Positions of scalars and sequences come from the parser's markers
//! (0-based columns, made 1-based here). A block mapping's start marker is
//! not reliable, so a mapping is placed at its first key, which is also
//! where `serde_yaml` places it.

use yaml_rust2::parser::{Event, Parser};

use crate::error::{FieldPath, Seg};

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: usize,
    pub column: usize,
}

const START: Pos = Pos { line: 1, column: 1 };

#[derive(Debug)]
enum Kind {
    Leaf,
    Seq(Vec<usize>),
    /// Entries: key text (None for a non-scalar key), key position, value.
    Map(Vec<(Option<String>, Pos, usize)>),
}

#[derive(Debug)]
struct Node {
    pos: Pos,
    kind: Kind,
}

/// An open container while building: node index, plus for maps the pending
/// key waiting for its value.
struct Open {
    node: usize,
    pending_key: Option<(Option<String>, Pos)>,
    /// For a map: whether the next child is a key.
    expect_key: bool,
}

/// Index of the positions of every node in the first YAML document.
#[derive(Debug)]
pub(crate) struct Locator {
    nodes: Vec<Node>,
    root: Option<usize>,
    /// Position of the start of a second document, if any.
    second_document: Option<Pos>,
}

impl Locator {
    /// Builds the index; never fails (see the module invariants).
    pub(crate) fn new(src: &str) -> Locator {
        let mut loc = Locator {
            nodes: Vec::new(),
            root: None,
            second_document: None,
        };
        // libyaml (behind serde_yaml) skips a byte order mark; so do we.
        let src = src.strip_prefix('\u{feff}').unwrap_or(src);
        let mut parser = Parser::new_from_str(src);
        let mut stack: Vec<Open> = Vec::new();
        let mut documents = 0usize;
        // A scan error ends the tree where it happened.
        while let Ok((event, mark)) = parser.next_token() {
            let pos = Pos {
                line: mark.line().max(1),
                column: mark.col() + 1,
            };
            match event {
                Event::StreamEnd => break,
                Event::DocumentStart => {
                    documents += 1;
                    if documents == 2 {
                        loc.second_document = Some(pos);
                        break;
                    }
                }
                Event::Nothing | Event::StreamStart | Event::DocumentEnd => {}
                Event::Scalar(text, ..) => {
                    loc.add(&mut stack, pos, Kind::Leaf, Some(text));
                }
                Event::Alias(_) => {
                    loc.add(&mut stack, pos, Kind::Leaf, None);
                }
                Event::SequenceStart(..) => {
                    let n = loc.add(&mut stack, pos, Kind::Seq(Vec::new()), None);
                    stack.push(Open {
                        node: n,
                        pending_key: None,
                        expect_key: false,
                    });
                }
                Event::MappingStart(..) => {
                    let n = loc.add(&mut stack, pos, Kind::Map(Vec::new()), None);
                    stack.push(Open {
                        node: n,
                        pending_key: None,
                        expect_key: true,
                    });
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    stack.pop();
                }
            }
        }
        loc
    }

    /// Records a node and attaches it to the innermost open container.
    /// `text` is the scalar's value, used when the node is a map key.
    fn add(&mut self, stack: &mut [Open], pos: Pos, kind: Kind, text: Option<String>) -> usize {
        let id = self.nodes.len();
        self.nodes.push(Node { pos, kind });
        let Some(top) = stack.last_mut() else {
            if self.root.is_none() {
                self.root = Some(id);
            }
            return id;
        };
        let parent = top.node;
        let is_map = matches!(self.nodes.get(parent).map(|n| &n.kind), Some(Kind::Map(_)));
        if is_map {
            if top.expect_key {
                // A block mapping's own marker is unreliable; use its first key.
                if let Some(Node {
                    kind: Kind::Map(entries),
                    pos: ppos,
                }) = self.nodes.get_mut(parent)
                {
                    if entries.is_empty() && top.pending_key.is_none() {
                        *ppos = pos;
                    }
                }
                top.pending_key = Some((text, pos));
                top.expect_key = false;
            } else {
                let (key, kpos) = top.pending_key.take().unwrap_or((None, pos));
                if let Some(Node {
                    kind: Kind::Map(entries),
                    ..
                }) = self.nodes.get_mut(parent)
                {
                    entries.push((key, kpos, id));
                }
                top.expect_key = true;
            }
        } else if let Some(Node {
            kind: Kind::Seq(items),
            ..
        }) = self.nodes.get_mut(parent)
        {
            items.push(id);
        }
        id
    }

    /// The position of the value at `path`, or of its deepest existing
    /// ancestor.
    pub(crate) fn locate(&self, path: &FieldPath) -> Pos {
        let Some(mut cur) = self.root else {
            return START;
        };
        for seg in &path.0 {
            match self.child(cur, seg) {
                Some(next) => cur = next,
                None => break,
            }
        }
        self.pos_of(cur)
    }

    /// The position of the `nth` (0-based) occurrence of key `key` in the
    /// mapping at `path`, if there is one.
    pub(crate) fn locate_key(&self, path: &FieldPath, key: &str, nth: usize) -> Option<Pos> {
        let mut cur = self.root?;
        for seg in &path.0 {
            cur = self.child(cur, seg)?;
        }
        match &self.nodes.get(cur)?.kind {
            Kind::Map(entries) => entries
                .iter()
                .filter(|(k, _, _)| k.as_deref() == Some(key))
                .nth(nth)
                .map(|(_, p, _)| *p),
            _ => None,
        }
    }

    /// Where a second document starts, if the source has one.
    pub(crate) fn second_document(&self) -> Option<Pos> {
        self.second_document
    }

    fn child(&self, node: usize, seg: &Seg) -> Option<usize> {
        match (&self.nodes.get(node)?.kind, seg) {
            (Kind::Map(entries), Seg::Key(k)) => entries
                .iter()
                .rev()
                .find(|(key, _, _)| key.as_deref() == Some(k.as_str()))
                .map(|(_, _, v)| *v),
            (Kind::Seq(items), Seg::Index(i)) => items.get(*i).copied(),
            _ => None,
        }
    }

    fn pos_of(&self, node: usize) -> Pos {
        self.nodes.get(node).map(|n| n.pos).unwrap_or(START)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(s: &str) -> FieldPath {
        // Tiny parser for test paths like `a.b[2].c`.
        let mut p = FieldPath::root();
        for part in s.split('.').filter(|x| !x.is_empty()) {
            let mut it = part.split('[');
            let key = it.next().unwrap_or("");
            if !key.is_empty() {
                p = p.key(key);
            }
            for idx in it {
                p = p.index(idx.trim_end_matches(']').parse().unwrap());
            }
        }
        p
    }

    const SRC: &str = "\
# comment
node:
  name: n1
interfaces:
  - name: inside
    address: 10.0.0.1/24
  -   name: outside
      address: \"10.0.1.1/24\"
flow: {a: 1, b: [x, 'y']}
empty: {}
list: []
";

    fn at(l: &Locator, p: &str) -> (usize, usize) {
        let pos = l.locate(&path(p));
        (pos.line, pos.column)
    }

    #[test]
    fn block_positions() {
        let l = Locator::new(SRC);
        assert_eq!(at(&l, ""), (2, 1));
        assert_eq!(at(&l, "node"), (3, 3));
        assert_eq!(at(&l, "node.name"), (3, 9));
        assert_eq!(at(&l, "interfaces"), (5, 3));
        assert_eq!(at(&l, "interfaces[0]"), (5, 5));
        assert_eq!(at(&l, "interfaces[0].address"), (6, 14));
        assert_eq!(at(&l, "interfaces[1]"), (7, 7));
        assert_eq!(at(&l, "interfaces[1].address"), (8, 16));
    }

    #[test]
    fn flow_positions() {
        let l = Locator::new(SRC);
        assert_eq!(at(&l, "flow.a"), (9, 11));
        assert_eq!(at(&l, "flow.b"), (9, 17));
        assert_eq!(at(&l, "flow.b[1]"), (9, 21));
        assert_eq!(at(&l, "list"), (11, 7));
    }

    #[test]
    fn missing_paths_fall_back_to_ancestor() {
        let l = Locator::new(SRC);
        assert_eq!(at(&l, "interfaces[5].address"), (5, 3));
        assert_eq!(at(&l, "node.nope"), (3, 3));
        assert_eq!(at(&l, "nope.deeper"), (2, 1));
        assert_eq!(at(&l, "node[3]"), (3, 3));
    }

    #[test]
    fn keys_and_documents() {
        let l = Locator::new("a: 1\nb: 2\na: 3\n");
        let p = l.locate_key(&FieldPath::root(), "a", 1).unwrap();
        assert_eq!((p.line, p.column), (3, 1));
        assert!(l.locate_key(&FieldPath::root(), "a", 2).is_none());
        let two = Locator::new("a: 1\n---\nb: 2\n");
        assert_eq!(two.second_document().map(|p| p.line), Some(2));
        assert!(l.second_document().is_none());
    }

    #[test]
    fn broken_and_empty_input_never_panics() {
        for src in [
            "",
            "   ",
            "a: [",
            "- - - -",
            "{",
            "a: *x",
            "\t",
            "a:\n\tb: 1",
            "]]]",
            "? [a]\n: b",
        ] {
            let l = Locator::new(src);
            let p = l.locate(&path("a[0].b"));
            assert!(p.line >= 1 && p.column >= 1);
        }
    }
}
