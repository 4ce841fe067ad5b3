package api

// Encoded is a request turned into model input: the token ids and, per
// question, where its instruction and options sit. It is produced by
// record.Encode (record.Encoded is an alias of this type: it lives here so
// that Answer can take it without api importing record).
type Encoded struct {
	InputIDs  []int
	Questions []EncodedQuestion
	// FixedLength counts the prefix, schema and suffix tokens; StateTokens
	// the state tokens kept; StateTruncated tells whether the state was cut.
	FixedLength    int
	StateTokens    int
	StateTruncated bool
	// RecordID is str(record.get("id", "unknown")), as the reference keeps it.
	RecordID string
}

// EncodedQuestion is one question of an Encoded request (record.Question).
// Spans are half-open [start, end) token indexes into InputIDs.
type EncodedQuestion struct {
	ID          string
	Type        int // noul 0, choice 1, score 2 (QuestionType)
	Span        [2]int
	OptionSpans [][2]int
	OptionIDs   []string // in encoded order: true,false; sorted choice ids; "0".."n-1"
}
