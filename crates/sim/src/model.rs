//! The performance model the replay predicts with. It lives in the
//! planner crate ([`numaplace_plan::model`]), which ranks placements with
//! the same terms and figures, so the planner and the simulator can no
//! longer price one choice two ways (issue 48); this module re-exports it
//! for the simulator's callers. `docs/performance-model.md` derives it.

pub use numaplace_plan::model::{Access, GuestView, Model, Range, RANGES};
