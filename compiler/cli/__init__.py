"""The command-line tools `prover` and `npuc` and the check run they share."""
