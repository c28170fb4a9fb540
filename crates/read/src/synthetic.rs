//! Synthetic topology descriptions: a machine typed in a few words, such as
//! `2 sockets x 2 nodes x 8 cores x 2 threads, 64GiB per node, distances
//! 10/12/32`. The grammar is in `docs/formats/synthetic.md`.
//!
//! Parsing is in two steps: `Spec` holds what the words say (levels,
//! memory, huge pages, distances, extra nodes, numbering), then
//! `Spec::build` (`layout.rs`) lays out the machine. CPUs are numbered as
//! Linux does on x86 (all first threads, then all second threads) unless
//! `numbering linear` asks for sibling-adjacent numbers.

use crate::ParseError;
use numaplace_topo::{parse_size, Arch, Topology, MAX_NODE};

mod layout;

/// Most NUMA nodes a description may make: node numbers are below
/// [`MAX_NODE`], as in every reader. (Memory and huge pages are held to
/// [`MAX_NODE_BYTES`] per node, so sums over nodes cannot overflow.)
const MAX_NODES: u64 = MAX_NODE as u64;

/// Whether a command-line word that is no file reads as a description: it
/// holds a count followed by a level word (`2 sockets`, `8 cores`).
pub fn looks_synthetic(text: &str) -> bool {
    let t = text.trim_start();
    if t.starts_with(['/', '.', '~']) {
        return false;
    }
    let toks = lex(text);
    toks.windows(2).any(|w| {
        matches!((w[0].tok, w[1].tok), (Tok::Word(n), Tok::Word(l)) if is_integer(n) && Level::from_word(l).is_some())
    })
}

/// Parses a synthetic description into a topology.
pub fn parse(text: &str) -> Result<Topology, ParseError> {
    let spec = Parser::new(text).spec()?;
    let parts = spec.build(text)?;
    Ok(Topology::from_parts(parts)?)
}

// ---------------------------------------------------------------- lexing

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    /// Letters, digits, `.`, `-`, `_`.
    Word(&'a str),
    /// Any other visible character.
    Punct(char),
}

#[derive(Clone, Copy, Debug)]
struct Token<'a> {
    tok: Tok<'a>,
    start: usize,
    end: usize,
    /// Whether whitespace came before it (a chunk ends there).
    spaced: bool,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '-' | '_')
}

fn lex(text: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let mut spaced = true;
    let mut iter = text.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        if c == '#' {
            // A comment runs to the end of the line.
            for (_, c) in iter.by_ref() {
                if c == '\n' {
                    break;
                }
            }
            spaced = true;
        } else if c.is_whitespace() {
            spaced = true;
        } else if is_word_char(c) {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = iter.peek() {
                if !is_word_char(d) {
                    break;
                }
                end = j + d.len_utf8();
                iter.next();
            }
            out.push(Token { tok: Tok::Word(&text[i..end]), start: i, end, spaced });
            spaced = false;
        } else {
            out.push(Token { tok: Tok::Punct(c), start: i, end: i + c.len_utf8(), spaced });
            spaced = false;
        }
    }
    out
}

fn is_integer(w: &str) -> bool {
    !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit())
}

// ---------------------------------------------------------------- the spec

/// A level of the hierarchy, outermost first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Socket,
    Die,
    Node,
    L3,
    Core,
    Thread,
}

impl Level {
    fn from_word(w: &str) -> Option<Level> {
        let w = w.to_ascii_lowercase();
        Some(match w.as_str() {
            "socket" | "sockets" | "package" | "packages" | "pkg" | "pkgs" => Level::Socket,
            "die" | "dies" => Level::Die,
            "node" | "nodes" | "numa" => Level::Node,
            "l3" | "l3s" | "ccx" | "ccxs" | "llc" | "llcs" => Level::L3,
            "core" | "cores" => Level::Core,
            "thread" | "threads" | "pu" | "pus" => Level::Thread,
            _ => return None,
        })
    }

    /// Dies and nodes share a rank: either may hold the other (Zen puts
    /// several dies in one node, Cascade Lake-AP one node per die), so
    /// their written order decides.
    fn rank(self) -> u8 {
        match self {
            Level::Socket => 0,
            Level::Die | Level::Node => 1,
            Level::L3 => 2,
            Level::Core => 3,
            Level::Thread => 4,
        }
    }
}

/// `N level [per outer]` as written.
#[derive(Clone, Debug)]
struct LevelSpec {
    level: Level,
    count: u64,
    per: Option<Level>,
    /// The words, for errors.
    words: String,
}

#[derive(Clone, Debug)]
enum Memory {
    /// The same size on every node (`per node`) or split over each
    /// socket's nodes (`per socket`).
    Per(u64, Level),
    /// Split evenly over the nodes with CPUs.
    Total(u64),
    /// One size per node with CPUs.
    List(Vec<u64>),
}

#[derive(Clone, Debug)]
struct HugeSpec {
    pools: Vec<(u64, u64)>,
    total: bool,
}

#[derive(Clone, Debug)]
enum Distances {
    /// Local, same socket, other socket.
    Tiers(u32, u32, u32),
    /// A full matrix, rows in node order.
    Matrix(Vec<Vec<u32>>),
}

#[derive(Clone, Debug)]
struct ExtraNodes {
    count: u64,
    size: u64,
    kind: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct Spec {
    levels: Vec<LevelSpec>,
    memory: Option<Memory>,
    hugepages: Option<HugeSpec>,
    distances: Option<Distances>,
    extra: Vec<ExtraNodes>,
    linear: bool,
    /// `arch ppc64le`; x86-64 when not written.
    arch: Option<Arch>,
}

fn err(field: &str, expected: &'static str, found: &str) -> ParseError {
    ParseError::bad(field, expected, found)
}

// ---------------------------------------------------------------- parsing

const WHAT: &str = "levels (`2 sockets x 8 cores`), memory (`64GiB per node`), `hugepages 2MiB:1024`, \
                    `distances 10/21`, `numbering linear`, `arch ppc64le` or `+ 2 memory-only nodes of 16GiB`";

struct Parser<'a> {
    text: &'a str,
    toks: Vec<Token<'a>>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Parser<'a> {
        Parser { text, toks: lex(text), pos: 0 }
    }

    fn tok(&self, at: usize) -> Option<Tok<'a>> {
        self.toks.get(at).map(|t| t.tok)
    }

    fn word(&self, at: usize) -> Option<&'a str> {
        match self.tok(at) {
            Some(Tok::Word(w)) => Some(w),
            _ => None,
        }
    }

    fn word_is(&self, at: usize, options: &[&str]) -> bool {
        self.word(at).is_some_and(|w| options.iter().any(|o| w.eq_ignore_ascii_case(o)))
    }

    fn punct_is(&self, at: usize, options: &[char]) -> bool {
        matches!(self.tok(at), Some(Tok::Punct(c)) if options.contains(&c))
    }

    /// The text of the whitespace-free chunk holding token `at`, from that
    /// token on (what an error shows as found).
    fn chunk(&self, at: usize) -> &'a str {
        let Some(first) = self.toks.get(at) else { return "end of description" };
        let mut end = first.end;
        for t in self.toks.iter().skip(at + 1) {
            if t.spaced {
                break;
            }
            end = t.end;
        }
        self.text.get(first.start..end).unwrap_or("")
    }

    /// Text from token `from` to the end of token `to` (inclusive).
    fn span(&self, from: usize, to: usize) -> &'a str {
        match (self.toks.get(from), self.toks.get(to)) {
            (Some(a), Some(b)) if a.start <= b.end => self.text.get(a.start..b.end).unwrap_or(""),
            _ => self.chunk(from),
        }
    }

    fn spec(mut self) -> Result<Spec, ParseError> {
        let mut spec = Spec::default();
        while self.pos < self.toks.len() {
            let p = self.pos;
            if self.punct_is(p, &[',', ';']) || self.word_is(p, &["with", "and"]) {
                self.pos += 1;
            } else if self.punct_is(p, &['+']) || self.word_is(p, &["plus"]) {
                self.pos += 1;
                let extra = self.extra_nodes()?;
                spec.extra.push(extra);
            } else if self.word_is(p, &["memory", "mem", "ram"]) {
                self.pos += 1;
                self.skip_colon();
                let m = self.memory(true)?;
                set_once(&mut spec.memory, m, "memory", self.span(p, self.pos.saturating_sub(1)))?;
            } else if self.word_is(p, &["hugepages", "hugepage", "huge", "hp"]) {
                self.pos += 1;
                if self.word_is(self.pos, &["pages", "page"]) {
                    self.pos += 1;
                }
                self.skip_colon();
                let h = self.hugepages()?;
                set_once(&mut spec.hugepages, h, "hugepages", self.span(p, self.pos.saturating_sub(1)))?;
            } else if self.word_is(p, &["distances", "distance", "slit"]) {
                self.pos += 1;
                self.skip_colon();
                let d = self.distances()?;
                set_once(&mut spec.distances, d, "distances", self.span(p, self.pos.saturating_sub(1)))?;
            } else if self.word_is(p, &["arch", "architecture"]) {
                self.pos += 1;
                self.skip_colon();
                // Only the architectures numaplace writes domains for: a
                // typo must not become an `Other` host.
                let arch = match self.word(self.pos).map(Arch::from_name) {
                    Some(arch @ (Arch::X86_64 | Arch::Ppc64le | Arch::Ppc64 | Arch::Aarch64)) => arch,
                    _ => return Err(err("arch", "`x86_64`, `ppc64le`, `ppc64` or `aarch64`", self.chunk(self.pos))),
                };
                self.pos += 1;
                set_once(&mut spec.arch, arch, "arch", self.span(p, self.pos.saturating_sub(1)))?;
            } else if self.word_is(p, &["numbering"]) {
                self.pos += 1;
                self.skip_colon();
                spec.linear = if self.word_is(self.pos, &["linear", "adjacent", "smt-adjacent", "sequential"]) {
                    true
                } else if self.word_is(self.pos, &["linux", "x86", "smt-last", "default"]) {
                    false
                } else {
                    return Err(err("numbering", "`linux` or `linear`", self.chunk(self.pos)));
                };
                self.pos += 1;
            } else if self.word(p).is_some_and(is_integer) && self.word(p + 1).and_then(Level::from_word).is_some() {
                self.levels(&mut spec.levels)?;
            } else if self.size_at(p).is_some() {
                let m = self.memory(false)?;
                set_once(&mut spec.memory, m, "memory", self.span(p, self.pos.saturating_sub(1)))?;
            } else {
                return Err(err("description", WHAT, self.chunk(p)));
            }
        }
        if spec.levels.is_empty() {
            return Err(err(
                "levels",
                "at least one level such as `8 cores` or `2 sockets x 8 cores`",
                self.text.trim(),
            ));
        }
        Ok(spec)
    }

    fn skip_colon(&mut self) {
        if self.punct_is(self.pos, &[':', '=']) {
            self.pos += 1;
        }
    }

    /// `N level [per outer] (x N level [per outer])*`.
    fn levels(&mut self, out: &mut Vec<LevelSpec>) -> Result<(), ParseError> {
        loop {
            let start = self.pos;
            let count = self.count("levels", "a count of at least 1 such as `8`")?;
            let level = self.word(self.pos).and_then(Level::from_word).ok_or_else(|| {
                err("levels", "a level: sockets, dies, nodes, l3, cores or threads", self.chunk(self.pos))
            })?;
            self.pos += 1;
            let mut per = None;
            if self.word_is(self.pos, &["per", "each"]) && self.word(self.pos + 1).and_then(Level::from_word).is_some()
            {
                per = self.word(self.pos + 1).and_then(Level::from_word);
                self.pos += 2;
            }
            let words = self.span(start, self.pos - 1).to_string();
            if out.iter().any(|l| l.level == level) {
                return Err(err("levels", "each level once", &words));
            }
            out.push(LevelSpec { level, count, per, words });
            if self.word_is(self.pos, &["x", "by"]) || self.punct_is(self.pos, &['×', '*']) {
                self.pos += 1;
                if !self.word(self.pos).is_some_and(is_integer) {
                    return Err(err("levels", "another level such as `8 cores` after `x`", self.chunk(self.pos)));
                }
            } else {
                return Ok(());
            }
        }
    }

    /// A whole number of at least 1.
    fn count(&mut self, field: &str, expected: &'static str) -> Result<u64, ParseError> {
        let w = self.word(self.pos).filter(|w| is_integer(w));
        let n = w.and_then(|w| w.parse::<u64>().ok()).filter(|&n| n >= 1);
        match n {
            Some(n) => {
                self.pos += 1;
                Ok(n)
            }
            None => Err(err(field, expected, self.chunk(self.pos))),
        }
    }

    /// A size with a unit at `at` (`64GiB` or `64 GiB`): bytes and tokens used.
    fn size_at(&self, at: usize) -> Option<(u64, usize)> {
        let w = self.word(at)?;
        if !w.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        if w.chars().any(|c| c.is_alphabetic()) {
            return parse_size(w).map(|b| (b, 1));
        }
        let unit = self.word(at + 1).filter(|u| u.chars().all(|c| c.is_ascii_alphabetic()))?;
        parse_size(&format!("{w}{unit}")).map(|b| (b, 2))
    }

    fn size(&mut self, field: &str, expected: &'static str) -> Result<u64, ParseError> {
        match self.size_at(self.pos) {
            Some((bytes, used)) => {
                self.pos += used;
                Ok(bytes)
            }
            None => Err(err(field, expected, self.chunk(self.pos))),
        }
    }

    /// `SIZE per node|per socket|each`, `SIZE total`, or `SIZE, SIZE, ...`.
    fn memory(&mut self, keyword: bool) -> Result<Memory, ParseError> {
        const EXPECTED: &str = "`64GiB per node`, `128GiB total` or one size per node (`memory 64GiB,32GiB`)";
        let first = self.size("memory", EXPECTED)?;
        if self.word_is(self.pos, &["per"]) {
            let level = self.word(self.pos + 1).and_then(Level::from_word);
            match level {
                Some(l @ (Level::Node | Level::Socket)) => {
                    self.pos += 2;
                    return Ok(Memory::Per(first, l));
                }
                _ => return Err(err("memory", "`per node` or `per socket`", self.chunk(self.pos + 1))),
            }
        }
        if self.word_is(self.pos, &["each", "per-node"]) {
            self.pos += 1;
            return Ok(Memory::Per(first, Level::Node));
        }
        if self.word_is(self.pos, &["in"]) && self.word_is(self.pos + 1, &["total"]) {
            self.pos += 2;
            return Ok(Memory::Total(first));
        }
        if self.word_is(self.pos, &["total"]) {
            self.pos += 1;
            return Ok(Memory::Total(first));
        }
        let mut list = vec![first];
        while self.punct_is(self.pos, &[',', '/']) && self.size_at(self.pos + 1).is_some() && keyword {
            self.pos += 1;
            list.push(self.size("memory", EXPECTED)?);
        }
        if !keyword {
            // A bare size needs saying what it is per.
            return Err(err("memory", EXPECTED, self.chunk(self.pos.saturating_sub(1))));
        }
        Ok(Memory::List(list))
    }

    /// `SIZE:COUNT (, SIZE:COUNT)* [per node | each | total]`.
    fn hugepages(&mut self) -> Result<HugeSpec, ParseError> {
        const EXPECTED: &str = "page size and count such as `2MiB:1024` or `1GiB:16 per node`";
        let mut pools: Vec<(u64, u64)> = Vec::new();
        loop {
            let start = self.pos;
            let size = self.size("hugepages", EXPECTED)?;
            if !self.punct_is(self.pos, &[':', '=']) {
                return Err(err("hugepages", EXPECTED, self.chunk(start)));
            }
            self.pos += 1;
            let count = self
                .word(self.pos)
                .filter(|w| is_integer(w))
                .and_then(|w| w.parse::<u64>().ok())
                .ok_or_else(|| err("hugepages", EXPECTED, self.chunk(start)))?;
            self.pos += 1;
            if pools.iter().any(|&(s, _)| s == size) {
                return Err(err("hugepages", "each page size once", self.span(start, self.pos - 1)));
            }
            pools.push((size, count));
            let more = self.punct_is(self.pos, &[',', '+'])
                && self.size_at(self.pos + 1).is_some_and(|(_, used)| self.punct_is(self.pos + 1 + used, &[':', '=']));
            if !more {
                break;
            }
            self.pos += 1;
        }
        let mut total = false;
        if self.word_is(self.pos, &["per"]) && self.word_is(self.pos + 1, &["node", "numa"]) {
            self.pos += 2;
        } else if self.word_is(self.pos, &["each", "per-node"]) {
            self.pos += 1;
        } else if self.word_is(self.pos, &["total"]) {
            self.pos += 1;
            total = true;
        }
        Ok(HugeSpec { pools, total })
    }

    /// `10/12/32`, `10/21`, or a matrix `10,21;21,10`.
    fn distances(&mut self) -> Result<Distances, ParseError> {
        const EXPECTED: &str = "10/12/32 (local/same socket/remote), 10/21, or a matrix such as 10,21;21,10";
        let start = self.pos;
        let bad = |p: &Parser| err("distances", EXPECTED, p.chunk(start));
        let mut rows: Vec<Vec<u32>> = vec![Vec::new()];
        let mut slash = false;
        let mut comma = false;
        loop {
            let value = self
                .word(self.pos)
                .filter(|w| is_integer(w))
                .and_then(|w| w.parse::<u32>().ok())
                .ok_or_else(|| bad(self))?;
            self.pos += 1;
            if let Some(row) = rows.last_mut() {
                row.push(value);
            }
            let next_is_number = self.word(self.pos + 1).is_some_and(is_integer);
            if self.punct_is(self.pos, &['/']) {
                slash = true;
            } else if self.punct_is(self.pos, &[',']) && next_is_number {
                comma = true;
            } else if self.punct_is(self.pos, &[';']) && next_is_number {
                comma = true;
                rows.push(Vec::new());
            } else {
                break;
            }
            self.pos += 1;
        }
        // Something glued on (`10/x`) is a typo, not the next clause.
        if self.toks.get(self.pos).is_some_and(|t| !t.spaced) && !self.punct_is(self.pos, &[',', ';']) {
            return Err(bad(self));
        }
        if slash && comma {
            return Err(bad(self));
        }
        if slash {
            let row = rows.concat();
            return match row.as_slice() {
                [local, ..] if *local != 10 => {
                    Err(err("distances", "10 as the first (local) distance", self.span(start, self.pos - 1)))
                }
                [local, remote] => Ok(Distances::Tiers(*local, *remote, *remote)),
                [local, near, far] => Ok(Distances::Tiers(*local, *near, *far)),
                _ => Err(bad(self)),
            };
        }
        Ok(Distances::Matrix(rows))
    }

    /// `N [kind] memory-only node(s) [of] SIZE [each] [kind]`.
    fn extra_nodes(&mut self) -> Result<ExtraNodes, ParseError> {
        const EXPECTED: &str = "`+ 2 memory-only nodes of 16GiB` (optionally HBM, CXL, MCDRAM, NVM)";
        let count = self.count("memory-only nodes", EXPECTED)?;
        let mut kind = None;
        loop {
            let Some(w) = self.word(self.pos) else {
                return Err(err("memory-only nodes", EXPECTED, self.chunk(self.pos)));
            };
            if let Some(k) = kind_word(w) {
                kind = k;
            } else if Level::from_word(w) == Some(Level::Node) {
                self.pos += 1;
                break;
            } else if !["memory-only", "memory", "only", "cpuless", "cpu-less"]
                .iter()
                .any(|o| w.eq_ignore_ascii_case(o))
            {
                return Err(err("memory-only nodes", EXPECTED, self.chunk(self.pos)));
            }
            self.pos += 1;
        }
        if self.word_is(self.pos, &["of", "with"]) {
            self.pos += 1;
        }
        let size = self.size("memory-only nodes", EXPECTED)?;
        if self.word_is(self.pos, &["each"]) {
            self.pos += 1;
        }
        if let Some(k) = self.word(self.pos).and_then(kind_word) {
            kind = k;
            self.pos += 1;
        }
        Ok(ExtraNodes { count, size, kind })
    }
}

/// Memory kind words, as the model names kinds (`None` inside for DRAM).
fn kind_word(w: &str) -> Option<Option<String>> {
    let k = match w.to_ascii_lowercase().as_str() {
        "hbm" => "HBM",
        "mcdram" => "MCDRAM",
        "cxl" => "CXL-DRAM",
        "nvm" | "pmem" => "NVM",
        "gpu" => "GPUMemory",
        "dram" => return Some(None),
        _ => return None,
    };
    Some(Some(k.to_string()))
}

fn set_once<T>(slot: &mut Option<T>, value: T, field: &str, found: &str) -> Result<(), ParseError> {
    if slot.is_some() {
        return Err(err(field, "this clause only once", found));
    }
    *slot = Some(value);
    Ok(())
}
