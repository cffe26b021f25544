//! runledger's compiled read path (issue #38): Avro single-object records, as they
//! sit on the log, to Arrow columns, with no Python object per record.
//!
//! `BatchDecoder` is given every schema file once (the newest schema of each type,
//! and every writer schema by its 8-byte fingerprint, as `events.registry` knows
//! them), then decodes a batch of record values: each record's writer schema is
//! found by the fingerprint of its prefix (`C3 01`, then the fingerprint), its
//! body read and resolved into the newest schema of its type (Avro's rules), and
//! its fields appended to that type's columns (`columns`). The GIL is released
//! while it decodes. What it cannot read is said per record with the reasons the
//! Python codec gives (`events.codec`): `empty`, `truncated`, `bad_magic`,
//! `unknown_fingerprint`, `body_invalid`, `trailing_bytes`.
//!
//! The Python codec stays the reference: tests/events/test_columnar.py holds the
//! columns to its records on every schema file.
//!
//! `payloads` (`payload`) writes the `events` table's canonical JSON payload of
//! each record of a type's columns, as `projectors.payload` does for an event.
//!
//! `verify_many` (`verify`) checks a batch of report signatures without the GIL,
//! with the libsodium function PyNaCl verifies with (`events.signed.bulk`).
//! `OrderCore` (`planner`) is the data plane's planner loop (`dataplane.order`).

mod columns;
mod direct;
mod payload;
mod planner;
mod verify;

use std::collections::HashMap;
use std::io::{self, Read};

use apache_avro::from_avro_datum;
use apache_avro::schema::Schema;
use apache_avro::types::Value;
use arrow::array::{Array, Int32Array, RecordBatch, StructArray};
use arrow::pyarrow::{PyArrowType, ToPyArrow};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use columns::{plan, Col};
use direct::{shape, Cursor, Shape};

const MAGIC: [u8; 2] = [0xC3, 0x01];
const PREFIX_LEN: usize = 10;

struct Writer {
    schema: Schema,
    reader: usize, // index into BatchDecoder::readers
    same: bool,    // the writer schema is its type's newest: nothing to resolve
    version: i32,  // its schema file's version (the events table's writer_version)
    label: String, // "<Type> v<N>", for the messages
}

struct Reader {
    event_type: String,
    schema: Schema,
    shape: Shape, // how its bodies lie, for those written with it (direct)
}

/// Decodes batches of record values into one Arrow record batch per event type.
#[pyclass(module = "runledger_native", frozen)]
struct BatchDecoder {
    readers: Vec<Reader>,
    writers: HashMap<[u8; 8], Writer>,
}

type Refusal = (&'static str, String);

/// A body as apache-avro reads it, except that running out of bytes is an error of
/// its own kind: apache-avro takes an `UnexpectedEof` inside a string or boolean for
/// the end of a file and reads a null, which would let a body cut short pass as a
/// record with a null in it (the Python codec refuses it as `body_invalid`).
struct Body<'a>(&'a [u8]);

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.0.is_empty() {
            return Err(io::Error::new(io::ErrorKind::Other, "the body ends early"));
        }
        let n = buf.len().min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() > self.0.len() {
            self.0 = &[];
            return Err(io::Error::new(io::ErrorKind::Other, "the body ends early"));
        }
        buf.copy_from_slice(&self.0[..buf.len()]);
        self.0 = &self.0[buf.len()..];
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl BatchDecoder {
    /// The writer schema a value's prefix names, and its body.
    fn writer_of<'d>(&self, data: &'d [u8]) -> Result<(&Writer, &'d [u8]), Refusal> {
        if data.len() < PREFIX_LEN {
            return Err(("truncated",
                        format!("{} bytes is shorter than the 10-byte prefix", data.len())));
        }
        if data[..2] != MAGIC {
            return Err(("bad_magic", format!("starts with {}, expected c301", hex(&data[..2]))));
        }
        let mut fingerprint = [0u8; 8];
        fingerprint.copy_from_slice(&data[2..PREFIX_LEN]);
        let Some(writer) = self.writers.get(&fingerprint) else {
            return Err(("unknown_fingerprint",
                        format!("no schema file has fingerprint {}", hex(&fingerprint))));
        };
        Ok((writer, &data[PREFIX_LEN..]))
    }

    /// A body of an older writer, read and resolved into its type's newest schema.
    fn resolved(&self, writer: &Writer, data: &[u8]) -> Result<Value, Refusal> {
        let reader = &self.readers[writer.reader];
        let mut body = Body(data);
        let resolved = if writer.same { None } else { Some(&reader.schema) };
        let value = from_avro_datum(&writer.schema, &mut body, resolved)
            .map_err(|e| ("body_invalid", format!("{} body: {e}", writer.label)))?;
        if !body.0.is_empty() {
            return Err(trailing(writer, body.0.len()));
        }
        Ok(value)
    }

    /// Decode one value into its type's columns: its type's index, or a refusal; an
    /// `Err` is a bug (a column that does not fit its own schema), not the value's fault.
    fn take(&self, cols: &mut [Option<Col>], data: Option<&[u8]>)
            -> Result<Result<(usize, i32), Refusal>, String> {
        let Some(bytes) = data else {
            return Ok(Err(("empty", "record has no value (tombstone)".to_string())));
        };
        let (writer, body) = match self.writer_of(bytes) {
            Ok(found) => found,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let reader = writer.reader;
        let col = match &mut cols[reader] {
            Some(col) => col,
            slot => slot.insert(plan(&self.readers[reader].schema)?.0),
        };
        let refused = |e: String| ("body_invalid", format!("{} body: {e}", writer.label));
        if writer.same {
            let shape = &self.readers[reader].shape;
            let mut at = Cursor { rest: body };
            if let Err(e) = shape.check(&mut at) {
                return Ok(Err(refused(e)));
            }
            if !at.rest.is_empty() {
                return Ok(Err(trailing(writer, at.rest.len())));
            }
            shape.append(col, &mut Cursor { rest: body })?;
        } else {
            let value = match self.resolved(writer, body) {
                Ok(value) => value,
                Err(refusal) => return Ok(Err(refusal)),
            };
            if let Err(e) = col.fits(Some(&value), false) {
                return Ok(Err(refused(e)));
            }
            col.push(Some(&value))?;
        }
        Ok(Ok((reader, writer.version)))
    }

    /// Every value's reader index (-1: refused), the columns of each reader seen, and
    /// the refusals (index, reason, detail). Runs without the GIL.
    fn decode_all(&self, values: &[Option<&[u8]>]) -> Result<Decoded, String> {
        let mut kinds = Vec::with_capacity(values.len());
        let mut versions = Vec::with_capacity(values.len());
        let mut cols: Vec<Option<Col>> = (0..self.readers.len()).map(|_| None).collect();
        let mut refused = Vec::new();
        for (i, data) in values.iter().enumerate() {
            match self.take(&mut cols, *data)? {
                Ok((reader, version)) => {
                    kinds.push(reader as i32);
                    versions.push(version);
                }
                Err((reason, detail)) => {
                    kinds.push(-1);
                    versions.push(-1);
                    refused.push((i, reason, detail));
                }
            }
        }
        Ok(Decoded { kinds, versions, cols, refused })
    }
}

/// A batch decoded: per value its reader index and writer version (-1 where refused),
/// the columns of each reader seen, and the refusals (index, reason, detail).
struct Decoded {
    kinds: Vec<i32>,
    versions: Vec<i32>,
    cols: Vec<Option<Col>>,
    refused: Vec<(usize, &'static str, String)>,
}

/// The refusal of a body that goes on after its record.
fn trailing(writer: &Writer, left: usize) -> Refusal {
    ("trailing_bytes", format!("{}: {left} bytes after the body", writer.label))
}

#[pymethods]
impl BatchDecoder {
    /// `readers`: (event type, newest schema JSON) per type; `writers`: (fingerprint,
    /// event type, version, writer schema JSON) per schema file, the newest included.
    #[new]
    fn new(readers: Vec<(String, String)>, writers: Vec<(Vec<u8>, String, u32, String)>)
           -> PyResult<Self> {
        let mut parsed = Vec::with_capacity(readers.len());
        let mut index = HashMap::new();
        for (event_type, text) in readers {
            let schema = Schema::parse_str(&text).map_err(|e| {
                PyValueError::new_err(format!("the newest schema of {event_type}: {e}"))
            })?;
            plan(&schema).map_err(|e| PyValueError::new_err(format!("{event_type}: {e}")))?;
            let shape = shape(&schema)
                .map_err(|e| PyValueError::new_err(format!("{event_type}: {e}")))?;
            index.insert(event_type.clone(), parsed.len());
            parsed.push(Reader { event_type, schema, shape });
        }
        let mut by_fingerprint = HashMap::new();
        for (fingerprint, event_type, version, text) in writers {
            let fp: [u8; 8] = fingerprint.as_slice().try_into().map_err(|_| {
                PyValueError::new_err(format!("a fingerprint of {event_type} is {} bytes, not 8",
                                              fingerprint.len()))
            })?;
            let Some(&reader) = index.get(&event_type) else {
                return Err(PyValueError::new_err(format!("{event_type} has no newest schema")));
            };
            let schema = Schema::parse_str(&text).map_err(|e| {
                PyValueError::new_err(format!("a writer schema of {event_type}: {e}"))
            })?;
            let same = schema == parsed[reader].schema;
            let version = i32::try_from(version).map_err(|_| {
                PyValueError::new_err(format!("{event_type} v{version}: too large a version"))
            })?;
            by_fingerprint.insert(fp, Writer { schema, reader, same, version,
                                               label: format!("{event_type} v{version}") });
        }
        Ok(BatchDecoder { readers: parsed, writers: by_fingerprint })
    }

    /// Decode `values` (a list of bytes, or None for a tombstone).
    ///
    /// Returns `(kinds, versions, batches, refused)`: `kinds`, a pyarrow Int32Array
    /// with each value's event type index (`event_types()[k]`; -1 where refused);
    /// `versions`, one with the version of the schema file that wrote it; `batches`, a
    /// dict of event type to a pyarrow RecordBatch of its records in their order in
    /// `values`; `refused`, a list of (index, reason, detail).
    fn decode<'py>(&self, py: Python<'py>, values: &Bound<'py, PyList>)
                   -> PyResult<(PyObject, PyObject, Bound<'py, PyDict>, Bound<'py, PyList>)> {
        let owned: Vec<Option<Bound<'py, PyBytes>>> = values
            .iter()
            .map(|v| if v.is_none() { Ok(None) } else { v.downcast_into::<PyBytes>().map(Some) })
            .collect::<Result<_, _>>()
            .map_err(|e| PyValueError::new_err(format!("a record value must be bytes: {e}")))?;
        let slices: Vec<Option<&[u8]>> =
            owned.iter().map(|v| v.as_ref().map(|b| b.as_bytes())).collect();
        let Decoded { kinds, versions, mut cols, refused } = py
            .allow_threads(|| self.decode_all(&slices))
            .map_err(PyValueError::new_err)?;
        let kinds = Int32Array::from(kinds).to_data().to_pyarrow(py)?;
        let versions = Int32Array::from(versions).to_data().to_pyarrow(py)?;
        let batches = PyDict::new(py);
        for (reader, col) in cols.iter_mut().enumerate() {
            let Some(col) = col else { continue };
            let array = col.finish().map_err(PyValueError::new_err)?;
            let records = array.as_any().downcast_ref::<StructArray>()
                .ok_or_else(|| PyValueError::new_err("a record schema that is not a record"))?;
            let batch = RecordBatch::from(records.clone());
            batches.set_item(&self.readers[reader].event_type, batch.to_pyarrow(py)?)?;
        }
        let out = PyList::empty(py);
        for (i, reason, detail) in refused {
            out.append((i, reason, detail))?;
        }
        Ok((kinds, versions, batches, out))
    }

    /// The event types, in the order `decode`'s kinds index them.
    fn event_types(&self) -> Vec<String> {
        self.readers.iter().map(|r| r.event_type.clone()).collect()
    }
}

/// The `events` table's payload of each record of `batch` (one type's columns, as
/// `BatchDecoder.decode` gives them): a pyarrow StringArray (`payload`).
#[pyfunction]
fn payloads(py: Python<'_>, batch: PyArrowType<RecordBatch>) -> PyResult<PyObject> {
    let batch = batch.0;
    let text = py.allow_threads(|| payload::payloads(&batch)).map_err(PyValueError::new_err)?;
    text.to_data().to_pyarrow(py)
}

/// The most a length in a body may claim: no record is larger (librdkafka's limit,
/// `events.limits`), and apache-avro allocates what a length says before it reads.
const MAX_LENGTH: usize = 1 << 20;

#[pymodule]
fn runledger_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    apache_avro::max_allocation_bytes(MAX_LENGTH);
    m.add_class::<BatchDecoder>()?;
    m.add_function(wrap_pyfunction!(verify::verify_many, m)?)?;
    m.add_class::<planner::OrderCore>()?;
    m.add_function(wrap_pyfunction!(payloads, m)?)?;
    Ok(())
}
