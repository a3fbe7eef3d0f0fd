//! Native backend sequence tests.
