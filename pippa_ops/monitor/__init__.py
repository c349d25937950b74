"""The dashboard core without textual: per-host monitors and the state they reduce into."""
