package bench

// ParsePGBench is parsePGBench, for the tests.
var ParsePGBench = parsePGBench
