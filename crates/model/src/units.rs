//! (being written: issue 14)
