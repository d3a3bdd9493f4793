//! The failure matrix of enqueued acknowledgement.
