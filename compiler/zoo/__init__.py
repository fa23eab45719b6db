"""The zoo gate: `prover zoo MANIFEST|DIR` checks many models x targets x policies x
references on Dask distributed and writes one aggregated report (`manifest`, `task`,
`run`, `report`, `baseline`)."""
