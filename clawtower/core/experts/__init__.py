"""Expert packages (openexperts spec 1.0): load, validate, assemble, bind, compile, run."""
