//! raidd engine (placeholder while the skeleton is built).
