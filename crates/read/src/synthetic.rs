//! Synthetic topology descriptions.
use crate::ParseError;
use numaplace_topo::Topology;

/// Whether text looks like a synthetic description rather than a path.
pub fn looks_synthetic(text: &str) -> bool {
    text.contains(" x ") || text.contains("socket")
}

/// Parses a synthetic description.
pub fn parse(_text: &str) -> Result<Topology, ParseError> {
    Err(ParseError::UnknownFormat)
}
