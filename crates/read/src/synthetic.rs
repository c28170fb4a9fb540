//! Synthetic topology descriptions: a machine typed in a few words, such as
//! `2 sockets x 2 nodes x 8 cores x 2 threads, 64GiB per node, distances
//! 10/12/32`. The grammar is in `docs/formats/synthetic.md`.
//!
//! Parsing is in two steps: `Spec` holds what the words say (levels,
//! memory, huge pages, distances, extra nodes, numbering), then
//! `Spec::build` lays out the machine. CPUs are numbered as Linux does on
//! x86 (all first threads, then all second threads) unless `numbering
//! linear` asks for sibling-adjacent numbers.

use crate::ParseError;
use numaplace_topo::{
    parse_size, Arch, Cache, Core, CpuSet, HugePages, Node, NodeId, Package, Parts, Topology, Warning, MAX_CPU,
    MAX_NODE, MAX_NODE_BYTES, MAX_SETS_BYTES,
};

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

/// Splits `total` into `n` near-equal parts (the first ones get the rest).
fn split(total: u64, n: u64) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    (0..n).map(|i| total / n + u64::from(i < total % n)).collect()
}

// ---------------------------------------------------------------- layout

impl Spec {
    /// Lays out the machine the words describe.
    fn build(&self, text: &str) -> Result<Parts, ParseError> {
        let mut levels = self.levels.clone();
        levels.sort_by_key(|l| l.level.rank());
        // Missing levels count 1 each: one node per socket, one thread per core.
        let default = |level| LevelSpec { level, count: 1, per: None, words: String::new() };
        if !levels.iter().any(|l| l.level == Level::Socket) {
            levels.insert(0, default(Level::Socket));
        }
        if !levels.iter().any(|l| l.level == Level::Node) {
            levels.insert(1, default(Level::Node));
        }
        if !levels.iter().any(|l| l.level == Level::Core) {
            let at = levels.iter().position(|l| l.level == Level::Thread).unwrap_or(levels.len());
            levels.insert(at, default(Level::Core));
        }
        if !levels.iter().any(|l| l.level == Level::Thread) {
            levels.push(default(Level::Thread));
        }
        // `8 cores per socket` counts cores over every level in between.
        for i in 0..levels.len() {
            let Some(per) = levels[i].per else { continue };
            let Some(outer) = levels[..i].iter().position(|l| l.level == per) else {
                return Err(err("levels", "`per` naming an outer level (`8 cores per socket`)", &levels[i].words));
            };
            let between = levels[outer + 1..i].iter().try_fold(1u64, |acc, l| acc.checked_mul(l.count));
            let between = between.ok_or_else(|| err("levels", "at most 65536 CPUs and 4096 nodes", text.trim()))?;
            if levels[i].count.checked_rem(between) != Some(0) {
                return Err(err("levels", "a count that the levels in between divide evenly", &levels[i].words));
            }
            levels[i].count /= between;
        }
        let count = |l: Level| levels.iter().find(|s| s.level == l).map_or(1, |s| s.count);
        let index = |l: Level| levels.iter().position(|s| s.level == l).unwrap_or(0);

        let too_big = || err("levels", "at most 65536 CPUs and 4096 nodes", text.trim());
        let core_at = index(Level::Core);
        let mut total_cores: u64 = 1;
        for l in &levels[..=core_at] {
            total_cores = total_cores.checked_mul(l.count).ok_or_else(too_big)?;
        }
        let threads = count(Level::Thread);
        let total_pus = total_cores.checked_mul(threads).ok_or_else(too_big)?;
        if total_pus > u64::from(MAX_CPU) {
            return Err(too_big());
        }
        // Units of a level over the whole machine, and cores in each unit.
        let units = |l: Level| -> u64 { levels[..=index(l)].iter().map(|s| s.count).product() };
        let cores_in = |l: Level| -> u64 { total_cores / units(l).max(1) };
        let sockets = count(Level::Socket);
        let nodes = units(Level::Node);
        let extra = self.extra.iter().fold(0u64, |acc, e| acc.saturating_add(e.count));
        if nodes.saturating_add(extra) > MAX_NODES {
            return Err(too_big());
        }
        let has_dies = self.levels.iter().any(|l| l.level == Level::Die);
        let dies_per_socket = units(Level::Die) / sockets;

        let cpu = |core: u64, thread: u64| -> u32 {
            let n = if self.linear { core * threads + thread } else { thread * total_cores + core };
            u32::try_from(n).unwrap_or(u32::MAX)
        };
        let has_l3 = self.levels.iter().any(|l| l.level == Level::L3);
        // The CPU sets cost a bit per number up to each set's highest, so a
        // machine near 65536 CPUs would take hundreds of MiB; the cost is
        // summed before anything is built, and held to the budget every
        // reader has (so whatever is read here also reads back from JSON).
        // A unit's highest CPU is its last core's last thread.
        let highest = |last_core: u64| Some(cpu(last_core, threads - 1));
        let mut bytes: usize = (0..total_cores).map(|g| CpuSet::bytes_for(highest(g))).sum();
        for (level, present) in [(Level::Node, true), (Level::L3, has_l3), (Level::Socket, true)] {
            let per = cores_in(level).max(1);
            if present {
                bytes += (0..units(level)).map(|u| CpuSet::bytes_for(highest((u + 1) * per - 1))).sum::<usize>();
            }
        }
        if bytes > MAX_SETS_BYTES {
            let found = format!("{total_pus} CPUs, whose CPU sets would take {} MiB", bytes >> 20);
            return Err(err("levels", "a machine whose CPU sets fit in 128 MiB (some 40000 CPUs or fewer)", &found));
        }
        let mut parts = Parts {
            name: Some(text.split_whitespace().collect::<Vec<_>>().join(" ")),
            arch: self.arch.clone().unwrap_or_default(),
            ..Parts::default()
        };
        let mut node_cpus = vec![CpuSet::new(); nodes as usize];
        let mut l3_cpus = vec![CpuSet::new(); if has_l3 { units(Level::L3) as usize } else { 0 }];
        let mut package_cpus = vec![CpuSet::new(); sockets as usize];
        let cores_per_socket = cores_in(Level::Socket);
        for g in 0..total_cores {
            let set: CpuSet = (0..threads).map(|t| cpu(g, t)).collect();
            let socket = g / cores_per_socket;
            let die = has_dies.then(|| (g / cores_in(Level::Die)) % dies_per_socket.max(1));
            for (list, level) in
                [(&mut node_cpus, Level::Node), (&mut l3_cpus, Level::L3), (&mut package_cpus, Level::Socket)]
            {
                if let Some(s) = list.get_mut((g / cores_in(level)) as usize) {
                    *s = s.union(&set);
                }
            }
            parts.cores.push(Core {
                package: Some(socket as u32),
                die: die.map(|d| d as u32),
                core_id: Some((g % cores_per_socket) as u32),
                cpus: set,
            });
        }
        parts.packages = package_cpus.into_iter().enumerate().map(|(i, cpus)| Package { id: i as u32, cpus }).collect();
        if has_dies && dies_per_socket > 1 {
            parts.dies = (0..sockets).map(|s| (s as u32, dies_per_socket as u32)).collect();
        }
        parts.caches = l3_cpus.into_iter().map(|cpus| Cache { level: 3, size_bytes: None, cpus }).collect();

        let memory = self.node_memory(nodes, nodes / sockets)?;
        if self.memory.is_none() {
            parts.warnings.push(Warning::NoMemoryInfo);
        }
        let big = |b: u64| b > MAX_NODE_BYTES;
        if memory.iter().copied().any(big) || self.extra.iter().any(|e| big(e.size)) {
            return Err(err("memory", "at most 1 PiB per node", text.trim()));
        }
        let pools = self.node_hugepages(nodes);
        if pools.iter().flatten().any(|h| big(h.total.saturating_mul(h.size_bytes))) {
            return Err(err("hugepages", "at most 1 PiB of pages per node", text.trim()));
        }
        for (i, cpus) in node_cpus.into_iter().enumerate() {
            let mem = memory.get(i).copied().unwrap_or(0);
            parts.nodes.push(Node {
                id: NodeId(i as u32),
                cpus,
                memory_bytes: mem,
                free_bytes: Some(mem),
                hugepages: pools.get(i).cloned().unwrap_or_default(),
                kind: None,
            });
        }
        for e in &self.extra {
            for _ in 0..e.count {
                let id = NodeId(parts.nodes.len() as u32);
                parts.nodes.push(Node {
                    id,
                    cpus: CpuSet::new(),
                    memory_bytes: e.size,
                    free_bytes: Some(e.size),
                    hugepages: Vec::new(),
                    kind: e.kind.clone(),
                });
            }
        }
        let nodes_per_socket = nodes / sockets;
        parts.distances = self.distances.as_ref().map(|d| match d {
            Distances::Matrix(rows) => rows.clone(),
            &Distances::Tiers(local, near, far) => {
                let all = parts.nodes.len() as u64;
                let socket_of = |n: u64| (n < nodes).then(|| n / nodes_per_socket.max(1));
                (0..all)
                    .map(|i| {
                        (0..all)
                            .map(|j| match (socket_of(i), socket_of(j)) {
                                _ if i == j => local,
                                (Some(a), Some(b)) if a == b => near,
                                _ => far,
                            })
                            .collect()
                    })
                    .collect()
            }
        });
        Ok(parts)
    }

    /// Memory of each node with CPUs.
    fn node_memory(&self, nodes: u64, nodes_per_socket: u64) -> Result<Vec<u64>, ParseError> {
        Ok(match &self.memory {
            None => vec![0; nodes as usize],
            Some(Memory::Per(size, Level::Socket)) => {
                let share = split(*size, nodes_per_socket.max(1));
                (0..nodes).map(|i| share.get((i % nodes_per_socket.max(1)) as usize).copied().unwrap_or(0)).collect()
            }
            Some(Memory::Per(size, _)) => vec![*size; nodes as usize],
            Some(Memory::Total(size)) => split(*size, nodes),
            Some(Memory::List(list)) => {
                if list.len() as u64 != nodes {
                    let found = format!("{} sizes for {} nodes", list.len(), nodes);
                    return Err(err(
                        "memory",
                        "one size per node with CPUs, `64GiB per node` or `128GiB total`",
                        &found,
                    ));
                }
                list.clone()
            }
        })
    }

    /// Huge page pools of each node with CPUs.
    fn node_hugepages(&self, nodes: u64) -> Vec<Vec<HugePages>> {
        let mut out = vec![Vec::new(); nodes as usize];
        let Some(spec) = &self.hugepages else { return out };
        for &(size, count) in &spec.pools {
            let counts = if spec.total { split(count, nodes) } else { vec![count; nodes as usize] };
            for (pools, n) in out.iter_mut().zip(counts) {
                pools.push(HugePages { size_bytes: size, total: n, free: Some(n) });
            }
        }
        out
    }
}
