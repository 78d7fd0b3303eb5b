//! Generated configurations in varied layouts (block and flow style, odd
//! indentation, comments, quoting), each with one value broken on purpose:
//! the error must point at exactly the line and column where the generator
//! wrote that value. This exercises the path locator on layouts the
//! hand-written error table does not cover.

use config::parse;
use proptest::prelude::*;

/// Emits YAML while tracking the 1-based line/column of what is written.
struct Out {
    text: String,
    line: usize,
    col: usize,
}

impl Out {
    fn new() -> Out {
        Out {
            text: String::new(),
            line: 1,
            col: 1,
        }
    }
    fn put(&mut self, s: &str) {
        for ch in s.chars() {
            if ch == '\n' {
                self.line += 1;
                self.col = 1;
            } else {
                self.col += 1;
            }
            self.text.push(ch);
        }
    }
    /// Writes `v`, returning where it starts.
    fn value(&mut self, v: &str) -> (usize, usize) {
        let at = (self.line, self.col);
        self.put(v);
        at
    }
}

#[derive(Debug, Clone)]
struct Layout {
    indent: usize,
    flow: Vec<bool>,
    quote: Vec<bool>,
    comments: Vec<bool>,
}

#[derive(Debug, Clone, Copy)]
enum Break {
    InterfaceAddress,
    InterfaceVlan,
    RouteVia,
    RuleDestinationPort,
    RuleInterface,
}

const INTERFACE_KEYS: [&str; 5] = ["name", "device", "address", "security-level", "vlan"];

fn generate(
    n_if: usize,
    n_routes: usize,
    n_rules: usize,
    lay: &Layout,
    brk: Break,
    target: usize,
) -> (String, (usize, usize), String) {
    let mut o = Out::new();
    let mut want = (0, 0);
    let mut field = String::new();
    let pad = " ".repeat(lay.indent);
    let flag = |v: &Vec<bool>, i: usize| v.get(i % v.len().max(1)).copied().unwrap_or(false);
    o.put("node:\n");
    o.put(&format!("{pad}name: gen\n"));
    o.put("interfaces:\n");
    for i in 0..n_if {
        let broken = matches!(brk, Break::InterfaceAddress | Break::InterfaceVlan) && i == target;
        let addr = if broken && matches!(brk, Break::InterfaceAddress) {
            format!("10.{i}.0.1/40")
        } else {
            format!("10.{i}.0.1/24")
        };
        let vlan = if broken && matches!(brk, Break::InterfaceVlan) {
            "5000".to_string()
        } else {
            format!("{}", i + 1)
        };
        let vals = [
            format!("if{i}"),
            format!("net_tap{i}"),
            addr,
            format!("{}", i * 10),
            vlan,
        ];
        let q = |s: &str, k: usize| {
            if k < 3 && flag(&lay.quote, i + k) {
                format!("\"{s}\"")
            } else {
                s.to_string()
            }
        };
        if flag(&lay.comments, i) {
            o.put(&format!("{pad}# interface {i}\n"));
        }
        if flag(&lay.flow, i) {
            o.put(&format!("{pad}- {{"));
            for (k, key) in INTERFACE_KEYS.iter().enumerate() {
                if k > 0 {
                    o.put(", ");
                }
                o.put(&format!("{key}: "));
                let at = o.value(&q(&vals[k], k));
                if broken
                    && ((k == 2 && matches!(brk, Break::InterfaceAddress))
                        || (k == 4 && matches!(brk, Break::InterfaceVlan)))
                {
                    want = at;
                    field = format!("interfaces[{i}].{key}");
                }
            }
            o.put("}\n");
        } else {
            for (k, key) in INTERFACE_KEYS.iter().enumerate() {
                let lead = if k == 0 {
                    format!("{pad}- ")
                } else {
                    format!("{pad}  ")
                };
                o.put(&format!("{lead}{key}: "));
                let at = o.value(&q(&vals[k], k));
                if broken
                    && ((k == 2 && matches!(brk, Break::InterfaceAddress))
                        || (k == 4 && matches!(brk, Break::InterfaceVlan)))
                {
                    want = at;
                    field = format!("interfaces[{i}].{key}");
                }
                if flag(&lay.comments, i + k) {
                    o.put("   # note");
                }
                o.put("\n");
            }
        }
    }
    if n_routes > 0 {
        o.put("routes:\n");
    }
    for r in 0..n_routes {
        let via = if matches!(brk, Break::RouteVia) && r == target {
            "192.0.2.1".to_string()
        } else {
            format!("10.{}.0.254", r % n_if)
        };
        if flag(&lay.flow, r + 1) {
            o.put(&format!("{pad}- {{destination: 172.16.{r}.0/24, via: "));
            let at = o.value(&via);
            o.put("}\n");
            if matches!(brk, Break::RouteVia) && r == target {
                want = at;
            }
        } else {
            o.put(&format!(
                "{pad}- destination: 172.16.{r}.0/24\n{pad}  via: "
            ));
            let at = o.value(&via);
            o.put("\n");
            if matches!(brk, Break::RouteVia) && r == target {
                want = at;
            }
        }
        if matches!(brk, Break::RouteVia) && r == target {
            field = format!("routes[{r}].via");
        }
    }
    if n_rules > 0 {
        o.put("access-rules:\n");
    }
    for r in 0..n_rules {
        let port = if matches!(brk, Break::RuleDestinationPort) && r == target {
            "\"90-80\"".to_string()
        } else {
            format!("{}", 1000 + r)
        };
        let iface = if matches!(brk, Break::RuleInterface) && r == target {
            "nope".to_string()
        } else {
            format!("if{}", r % n_if)
        };
        o.put(&format!("{pad}- name: rule{r}\n{pad}  action: permit\n"));
        if flag(&lay.comments, r) {
            o.put("\n# blank line and comment inside the list\n");
        }
        o.put(&format!("{pad}  interface: "));
        let at_if = o.value(&iface);
        o.put(&format!(
            "\n{pad}  protocol: tcp\n{pad}  destination-port: "
        ));
        let at_port = o.value(&port);
        o.put("\n");
        if r == target {
            match brk {
                Break::RuleDestinationPort => {
                    want = at_port;
                    field = format!("access-rules[{r}].destination-port");
                }
                Break::RuleInterface => {
                    want = at_if;
                    field = format!("access-rules[{r}].interface");
                }
                _ => {}
            }
        }
    }
    (o.text, want, field)
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        1usize..6,
        prop::collection::vec(any::<bool>(), 1..5),
        prop::collection::vec(any::<bool>(), 1..5),
        prop::collection::vec(any::<bool>(), 1..5),
    )
        .prop_map(|(indent, flow, quote, comments)| Layout {
            indent,
            flow,
            quote,
            comments,
        })
}

fn breakage() -> impl Strategy<Value = Break> {
    prop::sample::select(vec![
        Break::InterfaceAddress,
        Break::InterfaceVlan,
        Break::RouteVia,
        Break::RuleDestinationPort,
        Break::RuleInterface,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn generated_configs_parse_and_errors_point_at_the_value(
        n_if in 1usize..6, n_routes in 1usize..5, n_rules in 1usize..5,
        lay in layout(), brk in breakage(), pick in any::<prop::sample::Index>(),
    ) {
        let count = match brk {
            Break::InterfaceAddress | Break::InterfaceVlan => n_if,
            Break::RouteVia => n_routes,
            Break::RuleDestinationPort | Break::RuleInterface => n_rules,
        };
        let target = pick.index(count);
        // Without the breakage the same layout is valid.
        let (good, _, _) = generate(n_if, n_routes, n_rules, &lay, brk, usize::MAX);
        let parsed = parse(&good, "gen.yaml");
        prop_assert!(parsed.is_ok(), "{}\n{}", parsed.unwrap_err(), good);
        let c = parsed.unwrap();
        prop_assert_eq!(c.interfaces.len(), n_if);
        prop_assert_eq!(c.routes.len(), n_routes);
        prop_assert_eq!(c.access_rules.len(), n_rules);

        let (bad, (line, column), field) = generate(n_if, n_routes, n_rules, &lay, brk, target);
        let e = parse(&bad, "gen.yaml").unwrap_err();
        prop_assert_eq!((e.line(), e.column(), e.field()), (line, column, field.as_str()), "{}\n{}", e, bad);
    }
}
