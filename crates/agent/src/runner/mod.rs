//! The agent loop: calls the model, runs tools, records every step in a
//! convlog store, and resumes an interrupted evaluation by itself.
