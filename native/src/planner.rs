//! The data plane's planner loop in compiled code: `dataplane.order.Planner.plan_batch`,
//! step for step, with the same integers and the same floats.
//!
//! What is per record (the pick, the record's draw, its permuted index, its crop and
//! filters, packing) runs here; what is per source and epoch, or per set of active
//! sources, stays in Python and is asked for through callbacks: an epoch's
//! permutation key (`derive_key`, SHA-256), a set's exact integer weights
//! (`integer_weights`, over fractions), and a record's length (the store's offsets
//! index). The order is `rl-feistel-v1` (`dataplane.permute`): the splitmix64
//! finaliser as the Feistel round function, cycle walking, a keyed Fisher-Yates
//! table for 64 records or fewer. Integer comparisons of the exact mixture are in
//! i128 and refuse to overflow (the Python planner's are unbounded).
//!
//! Held to the Python planner by tests/dataplane/test_order.py (which runs through
//! this when it is built) and tests/dataplane/test_compiled_order.py (both, side by
//! side, on drawn manifests).

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
const M1: u64 = 0xBF58_476D_1CE4_E5B9;
const M2: u64 = 0x94D0_49BB_1331_11EB;
const SMALL: u64 = 64;
const ROUNDS: u64 = 6;
// Objects' lengths kept at most (all dropped past it): a bound on memory whatever the
// dataset's size, as the store's own cache of opened objects is.
const BLOCKS_KEPT: usize = 256;

fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(M1);
    x = (x ^ (x >> 27)).wrapping_mul(M2);
    x ^ (x >> 31)
}

fn stream_offset(key: u64) -> u64 {
    mix64(key).wrapping_add(GOLDEN)
}

fn keyed_hash(key: u64, i: u64) -> u64 {
    mix64(i.wrapping_mul(GOLDEN).wrapping_add(stream_offset(key)))
}

/// `dataplane.permute.Permutation`'s forward direction.
struct Permutation {
    n: u64,
    h: u32,
    offsets: Vec<u64>,
    table: Option<Vec<u64>>,
}

impl Permutation {
    fn new(n: u64, key: u64) -> Self {
        let bits = 64 - (n - 1).leading_zeros(); // (n - 1).bit_length()
        let h = ((bits + 1) / 2).max(1);
        let offsets = (0..ROUNDS).map(|r| stream_offset(keyed_hash(key, r))).collect();
        let table = (n <= SMALL).then(|| {
            let mut t: Vec<u64> = (0..n).collect();
            let shuffle = keyed_hash(key, 1 << 40);
            for j in (1..n).rev() {
                let r = keyed_hash(shuffle, j) % (j + 1);
                t.swap(j as usize, r as usize);
            }
            t
        });
        Permutation { n, h, offsets, table }
    }

    fn network(&self, x: u64) -> u64 {
        let (h, shift) = (self.h, 64 - self.h);
        let (mut left, mut right) = (x >> h, x & ((1u64 << h) - 1));
        for off in &self.offsets {
            let f = mix64(right.wrapping_mul(GOLDEN).wrapping_add(*off)) >> shift;
            (left, right) = (right, left ^ f);
        }
        (left << h) | right
    }

    fn at(&self, k: u64) -> u64 {
        if let Some(t) = &self.table {
            return t[k as usize];
        }
        let mut x = self.network(k);
        while x >= self.n {
            x = self.network(x);
        }
        x
    }
}

#[derive(Clone, Copy)]
enum Unit {
    Documents,
    Samples,
    Tokens,
    LossTokens,
}

#[derive(Clone, Copy, PartialEq)]
enum Exhaustion {
    Error,
    Stop,
    Renormalize,
    Repeat,
}

#[derive(Clone, Copy)]
struct Doc {
    source: usize,
    index: u64,
    epoch: u64,
    origin: i64,
    stop: i64,
    accepted: bool,
    counted: i64,
    peek: i64,
}

#[derive(Clone, Copy, PartialEq)]
struct Span {
    source: usize,
    index: u64,
    epoch: u64,
    origin: i64,
    start: i64,
    stop: i64,
}

/// `dataplane.order._Work`: the state under way through one call.
struct Work {
    position: i64,
    draws_total: u64,
    draws: Vec<u64>,
    units: Vec<i128>,
    base: Vec<i128>,
    active: Vec<bool>,
    residue: Option<Span>,
    finished: bool,
}

/// Why planning stopped short of a batch, for the Python side to raise.
enum Stop {
    Exhausted(usize, u64),
    Barren(usize),
    Overflow,
    Py(PyErr),
}

impl From<PyErr> for Stop {
    fn from(e: PyErr) -> Self {
        Stop::Py(e)
    }
}

#[pyclass(module = "runledger_native")]
pub struct OrderCore {
    records: Vec<u64>,
    seq_len: i64,
    packing_none: bool,
    unit: Unit,
    replacement: bool,
    exhaustion: Exhaustion,
    expected: bool,
    draw_key: Vec<u64>,
    crop_key: Vec<u64>,
    mix_key: u64,
    crops: Vec<(i64, bool)>,
    filters: Vec<Vec<(bool, i64)>>, // (is min_tokens, value)
    probs: Vec<f64>,
    lengths: PyObject,
    blocks: Option<PyObject>,
    kept: Vec<Vec<(u64, Vec<i64>)>>, // per source: (first index, lengths), by first
    kept_count: usize,
    epoch_key: PyObject,
    weights_of: PyObject,
    span: PyObject,
    perms: Vec<Option<(u64, Permutation)>>,
    // A set's exact weights, asked for once per set of active sources; `last` is the
    // set the previous pick used (sets change only when a source runs out), so a
    // pick compares two short vectors instead of hashing one.
    weights: HashMap<Vec<bool>, Arc<(Vec<i128>, i128)>>,
    last: Option<(Vec<bool>, Arc<(Vec<i128>, i128)>)>,
    peek: Vec<Option<(u64, Doc)>>,
    barren: Vec<u64>,
}

fn overflow<T>(v: Option<T>) -> Result<T, Stop> {
    v.ok_or(Stop::Overflow)
}

impl OrderCore {
    /// A record's length: from its object's lengths, asked for once per object when
    /// the caller gave `blocks`, else from `lengths` per record.
    fn length(&mut self, py: Python<'_>, source: usize, index: u64) -> Result<i64, Stop> {
        let Some(blocks) = &self.blocks else {
            return Ok(self.lengths.call1(py, (source, index))?.extract::<i64>(py)?);
        };
        let kept = &self.kept[source];
        let at = kept.partition_point(|(first, _)| *first <= index);
        if at > 0 {
            let (first, lengths) = &kept[at - 1];
            if let Some(n) = lengths.get((index - first) as usize) {
                return Ok(*n);
            }
        }
        let (first, array): (u64, PyObject) = blocks.call1(py, (source, index))?.extract(py)?;
        let lengths = PyBuffer::<i64>::get(array.bind(py))?.to_vec(py)?;
        let n = lengths.get((index - first) as usize).copied().ok_or_else(|| {
            Stop::Py(PyValueError::new_err(format!(
                "the lengths of source {source}'s object from {first} do not reach {index}")))
        })?;
        if self.kept_count >= BLOCKS_KEPT {
            self.kept.iter_mut().for_each(Vec::clear);
            self.kept_count = 0;
        }
        let kept = &mut self.kept[source];
        let at = kept.partition_point(|(f, _)| *f < first);
        kept.insert(at, (first, lengths));
        self.kept_count += 1;
        Ok(n)
    }

    fn permuted(&mut self, py: Python<'_>, i: usize, epoch: u64, k: u64) -> Result<u64, Stop> {
        let fresh = !matches!(&self.perms[i], Some((e, _)) if *e == epoch);
        if fresh {
            let key: u64 = self.epoch_key.call1(py, (i, epoch))?.extract(py)?;
            self.perms[i] = Some((epoch, Permutation::new(self.records[i], key)));
        }
        Ok(self.perms[i].as_ref().map(|(_, p)| p.at(k)).unwrap_or(0))
    }

    fn doc(&mut self, py: Python<'_>, i: usize, draw: u64) -> Result<Doc, Stop> {
        let n = self.records[i];
        let (epoch, k) = (draw / n, draw % n);
        let index = if self.replacement {
            keyed_hash(self.draw_key[i], draw) % n
        } else {
            self.permuted(py, i, epoch, k)?
        };
        let length = self.length(py, i, index)?;
        let (mut origin, mut stop) = (0i64, length);
        for &(max_tokens, random) in &self.crops {
            if stop - origin > max_tokens {
                if random {
                    let span = (stop - origin - max_tokens + 1) as u64;
                    origin += (keyed_hash(self.crop_key[i] ^ epoch, index) % span) as i64;
                }
                stop = origin + max_tokens;
            }
        }
        let accepted = self.filters[i].iter().all(|&(is_min, v)| {
            !((is_min && length < v) || (!is_min && length > v))
        });
        let mut doc = Doc { source: i, index, epoch, origin, stop, accepted, counted: 0, peek: 1 };
        match self.unit {
            Unit::Documents => doc.counted = 1,
            Unit::Samples => doc.counted = i64::from(accepted),
            Unit::Tokens | Unit::LossTokens => {
                let raw = if matches!(self.unit, Unit::LossTokens) { stop - origin - 1 } else {
                    stop - origin
                };
                let size = raw.max(0);
                doc.counted = if accepted { size } else { 0 };
                doc.peek = size.max(1);
            }
        }
        Ok(doc)
    }

    fn peeked(&mut self, py: Python<'_>, i: usize, draw: u64) -> Result<Doc, Stop> {
        if let Some((d, doc)) = self.peek[i] {
            if d == draw {
                return Ok(doc);
            }
        }
        let doc = self.doc(py, i, draw)?;
        self.peek[i] = Some((draw, doc));
        Ok(doc)
    }

    /// The exact integer weights of the set of sources `active`, and their sum.
    fn weights_for(&mut self, py: Python<'_>, active: &[bool])
                   -> Result<Arc<(Vec<i128>, i128)>, Stop> {
        if let Some((set, got)) = &self.last {
            if set.as_slice() == active {
                return Ok(Arc::clone(got));
            }
        }
        let got = match self.weights.get(active) {
            Some(got) => Arc::clone(got),
            None => {
                let asked = self.weights_of.call1(py, (PyTuple::new(py, active)?,))?;
                let got = Arc::new(asked.extract::<(Vec<i128>, i128)>(py)?);
                self.weights.insert(active.to_vec(), Arc::clone(&got));
                got
            }
        };
        self.last = Some((active.to_vec(), Arc::clone(&got)));
        Ok(got)
    }

    fn pick(&mut self, py: Python<'_>, w: &Work) -> Result<Option<usize>, Stop> {
        if !w.active.iter().any(|&on| on) {
            return Ok(None);
        }
        if self.expected {
            let u = (keyed_hash(self.mix_key, w.draws_total) >> 11) as f64 / (1u64 << 53) as f64;
            let mut cum = Vec::with_capacity(self.probs.len());
            let mut acc = 0.0f64;
            for (p, &on) in self.probs.iter().zip(&w.active) {
                acc += if on { *p } else { 0.0 };
                cum.push(acc);
            }
            let x = u * cum[cum.len() - 1];
            let i = cum.partition_point(|&c| c <= x); // bisect_right
            return Ok(Some(i.min(cum.len() - 1)));
        }
        let weights = self.weights_for(py, &w.active)?;
        let (a, big) = (&weights.0, weights.1);
        let sized = !matches!(self.unit, Unit::Documents | Unit::Samples);
        let mut total: i128 = 0;
        let mut counts = Vec::with_capacity(w.active.len());
        let mut sizes = Vec::with_capacity(w.active.len());
        for i in 0..w.active.len() {
            let c = overflow(w.units[i].checked_sub(w.base[i]))?;
            counts.push(c);
            if !w.active[i] {
                sizes.push(0i128);
                continue;
            }
            total = overflow(total.checked_add(c))?;
            sizes.push(if sized { i128::from(self.peeked(py, i, w.draws[i])?.peek) } else { 1 });
        }
        let (mut best, mut best_num, mut best_den): (Option<usize>, i128, i128) = (None, 0, 1);
        for i in 0..w.active.len() {
            let (c, s, ai) = (counts[i], sizes[i], a[i]);
            if !w.active[i] || ai == 0 {
                continue;
            }
            let quota = overflow(ai.checked_mul(overflow(total.checked_add(s))?))?;
            if overflow(c.checked_mul(big))? >= quota {
                continue; // taking it would pass its upper quota
            }
            let num = overflow(c.checked_add(s))?;
            if best.is_none()
                || overflow(num.checked_mul(best_den))? < overflow(best_num.checked_mul(ai))? {
                (best, best_num, best_den) = (Some(i), num, ai);
            }
        }
        match best {
            Some(i) => Ok(Some(i)),
            None => Err(Stop::Py(PyValueError::new_err(
                "no source is eligible; counts and total disagree"))),
        }
    }

    fn document(&mut self, py: Python<'_>, w: &mut Work) -> Result<Option<Doc>, Stop> {
        loop {
            if w.finished {
                return Ok(None);
            }
            let Some(i) = self.pick(py, w)? else {
                w.finished = true;
                return Ok(None);
            };
            let n = self.records[i];
            if !self.replacement && w.draws[i] >= n {
                match self.exhaustion {
                    Exhaustion::Error => return Err(Stop::Exhausted(i, w.draws[i] / n - 1)),
                    Exhaustion::Stop => {
                        w.finished = true;
                        return Ok(None);
                    }
                    Exhaustion::Renormalize => {
                        w.active[i] = false;
                        w.base = w.units.clone();
                        continue;
                    }
                    Exhaustion::Repeat => {}
                }
            }
            let doc = self.peeked_or_fresh(py, i, w.draws[i])?;
            w.units[i] = overflow(w.units[i].checked_add(i128::from(doc.counted)))?;
            w.draws[i] += 1;
            w.draws_total += 1;
            let useful = doc.accepted && doc.stop > doc.origin;
            self.barren[i] = if useful { 0 } else { self.barren[i] + 1 };
            let limit = if self.replacement { 64 * n } else { 2 * n };
            if self.barren[i] >= limit {
                return Err(Stop::Barren(i));
            }
            if doc.accepted {
                return Ok(Some(doc));
            }
        }
    }

    /// The peeked record when it is this draw's, else a fresh one (not kept: as Python).
    fn peeked_or_fresh(&mut self, py: Python<'_>, i: usize, draw: u64) -> Result<Doc, Stop> {
        match self.peek[i] {
            Some((d, doc)) if d == draw => Ok(doc),
            _ => self.doc(py, i, draw),
        }
    }

    fn sequence(&mut self, py: Python<'_>, w: &mut Work) -> Result<Option<Vec<Span>>, Stop> {
        if self.packing_none {
            loop {
                let Some(doc) = self.document(py, w)? else { return Ok(None) };
                if doc.stop > doc.origin {
                    w.position += 1;
                    return Ok(Some(vec![Span {
                        source: doc.source, index: doc.index, epoch: doc.epoch,
                        origin: doc.origin, start: doc.origin,
                        stop: doc.stop.min(doc.origin + self.seq_len),
                    }]));
                }
            }
        }
        let mut spans = Vec::new();
        let mut fill = 0i64;
        let mut residue = w.residue;
        while fill < self.seq_len {
            let r = match residue {
                Some(r) => r,
                None => {
                    let Some(doc) = self.document(py, w)? else { return Ok(None) };
                    if doc.stop == doc.origin {
                        continue;
                    }
                    Span { source: doc.source, index: doc.index, epoch: doc.epoch,
                           origin: doc.origin, start: doc.origin, stop: doc.stop }
                }
            };
            let take = (self.seq_len - fill).min(r.stop - r.start);
            if take == r.stop - r.start {
                spans.push(r);
                residue = None;
            } else {
                let cut = r.start + take;
                spans.push(Span { stop: cut, ..r });
                residue = Some(Span { start: cut, ..r });
            }
            fill += take;
        }
        w.residue = residue;
        w.position += 1;
        Ok(Some(spans))
    }

    fn span_to_py(&self, py: Python<'_>, s: &Span) -> PyResult<PyObject> {
        self.span.call1(py, (s.source, s.index, s.epoch, s.origin, s.start, s.stop))
    }
}

fn unit_of(name: &str) -> PyResult<Unit> {
    Ok(match name {
        "documents" => Unit::Documents,
        "samples" => Unit::Samples,
        "tokens" | "packed_sequences" => Unit::Tokens,
        "loss_tokens" => Unit::LossTokens,
        other => return Err(PyValueError::new_err(format!("unknown mixture unit {other:?}"))),
    })
}

fn exhaustion_of(name: &str) -> PyResult<Exhaustion> {
    Ok(match name {
        "error" => Exhaustion::Error,
        "stop" => Exhaustion::Stop,
        "renormalize" => Exhaustion::Renormalize,
        "repeat" => Exhaustion::Repeat,
        other => return Err(PyValueError::new_err(format!("unknown exhaustion {other:?}"))),
    })
}

type Residue = Option<(usize, u64, u64, i64, i64, i64)>;
type State = (i64, u64, Vec<u64>, Vec<i128>, Vec<i128>, Vec<bool>, Residue, bool);

#[pymethods]
impl OrderCore {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (records, seq_len, packing_none, unit, replacement, exhaustion, expected,
                        draw_key, crop_key, mix_key, crops, filters, probs, lengths, epoch_key,
                        weights_of, span, blocks=None))]
    fn new(records: Vec<u64>, seq_len: i64, packing_none: bool, unit: &str, replacement: bool,
           exhaustion: &str, expected: bool, draw_key: Vec<u64>, crop_key: Vec<u64>,
           mix_key: u64, crops: Vec<(i64, bool)>, filters: Vec<Vec<(bool, i64)>>,
           probs: Vec<f64>, lengths: PyObject, epoch_key: PyObject, weights_of: PyObject,
           span: PyObject, blocks: Option<PyObject>) -> PyResult<Self> {
        let k = records.len();
        if records.iter().any(|&n| n == 0) || [draw_key.len(), crop_key.len(), filters.len(),
                                                probs.len()].iter().any(|&l| l != k) {
            return Err(PyValueError::new_err("one entry per source, each with records"));
        }
        Ok(OrderCore {
            records, seq_len, packing_none, unit: unit_of(unit)?, replacement,
            exhaustion: exhaustion_of(exhaustion)?, expected, draw_key, crop_key, mix_key,
            crops, filters, probs, lengths, blocks, kept: vec![Vec::new(); k], kept_count: 0,
            epoch_key, weights_of, span,
            perms: (0..k).map(|_| None).collect(), weights: HashMap::new(), last: None,
            peek: vec![None; k], barren: vec![0; k],
        })
    }

    /// The next `size` sequences from `state`, and the state after them; None when the
    /// stream ends first. Errors come back as `("exhausted", source, epoch)`,
    /// `("barren", source)` or `("overflow",)` in place of the sequences.
    fn plan_batch(&mut self, py: Python<'_>, state: State, size: usize) -> PyResult<PyObject> {
        let (position, draws_total, draws, units, base, active, residue, finished) = state;
        let mut w = Work {
            position, draws_total, draws, units, base, active, finished,
            residue: residue.map(|(source, index, epoch, origin, start, stop)| Span {
                source, index, epoch, origin, start, stop }),
        };
        let mut out = Vec::with_capacity(size);
        for _ in 0..size {
            match self.sequence(py, &mut w) {
                Ok(Some(seq)) => out.push(seq),
                Ok(None) => return Ok(py.None()),
                Err(Stop::Py(e)) => return Err(e),
                Err(Stop::Exhausted(i, epoch)) => {
                    return Ok(("exhausted", i, epoch).into_pyobject(py)?.into_any().unbind())
                }
                Err(Stop::Barren(i)) => return Ok(("barren", i).into_pyobject(py)?.into_any().unbind()),
                Err(Stop::Overflow) => return Ok(("overflow",).into_pyobject(py)?.into_any().unbind()),
            }
        }
        let seqs = PyList::empty(py);
        for seq in &out {
            let spans: Vec<PyObject> = seq.iter().map(|s| self.span_to_py(py, s))
                .collect::<PyResult<_>>()?;
            seqs.append(PyTuple::new(py, spans)?)?;
        }
        let residue: Residue = w.residue.map(|s| (s.source, s.index, s.epoch, s.origin, s.start,
                                                  s.stop));
        let after: State = (w.position, w.draws_total, w.draws, w.units, w.base, w.active,
                            residue, w.finished);
        Ok(("ok", seqs, after).into_pyobject(py)?.into_any().unbind())
    }
}
