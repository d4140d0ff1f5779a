package scoring

// The skip reasons, for the external tests.
const (
	BadJSON      = badJSON
	BadRecord    = badRecord
	BadGroupSize = badGroupSize
)
