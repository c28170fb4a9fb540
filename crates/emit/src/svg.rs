//! SVG pictures.
