//! raidd runtime (placeholder while the skeleton is built).
