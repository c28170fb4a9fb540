//! numaplace's own topology JSON, read back exactly as it was written.

use crate::ParseError;
use numaplace_topo::Topology;
use numaplace_wire::topology::{DocError, ReservedDoc, TopologyDoc};

/// Parses numaplace topology JSON (`numaplace topology --format json`).
pub fn parse(text: &str) -> Result<Topology, ParseError> {
    parse_with_reserved(text).map(|(t, _)| t)
}

/// [`parse`], with the host's reservations when the document carries them.
pub fn parse_with_reserved(text: &str) -> Result<(Topology, Option<ReservedDoc>), ParseError> {
    let doc: TopologyDoc = serde_json::from_str(text).map_err(|e| ParseError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let parts = doc.to_parts().map_err(|e| match e {
        DocError::WrongFormat(found) => ParseError::bad("format", "\"numaplace-topology\"", &found),
        DocError::UnsupportedVersion(v) => ParseError::bad("version", "1", &v.to_string()),
        DocError::UnknownDeviceKind(k) => ParseError::bad("devices[].kind", "gpu, nic, nvme, storage or other", &k),
        DocError::OutOfRange { field, expected, found } => ParseError::bad(field, expected, &found),
    })?;
    Ok((Topology::from_parts(parts)?, doc.reserved))
}

/// Writes a topology as pretty JSON.
pub fn to_string(topology: &Topology) -> String {
    let doc = TopologyDoc::from(topology);
    // Serialising plain data with string keys cannot fail.
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}
