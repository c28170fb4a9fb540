//! Text views.
