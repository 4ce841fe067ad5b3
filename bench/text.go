package bench

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/clefrt/clef/engine/record"
)

// words are the synthetic states' vocabulary: plain English, so that any
// BPE tokenizer splits them into a few tokens each.
var words = strings.Fields(`account action address agent alert answer approval area audit balance bank batch bill
board budget buyer cache call card carrier case change channel charge check claim client code comment contract cost
count credit customer damage data date deal debit delay delivery demand deposit desk device discount dispute document
driver email error event expense export fee file flag form fraud goods group guest history holder hotel incident
invoice issue item journey key label ledger level limit line list loan location log manager market member message
method model note notice number offer office order owner package page parcel partner payment period phone plan policy
portal price priority product profile project purchase quote rate reason receipt record refund region release report
request reserve result return review risk room route rule sale schedule seller service session shipment signal site
size source staff status stock store supplier support system task team term ticket total trade transfer trip update
user value vendor visit warehouse window work`)

// fillers are tried one at a time to land exactly on a target token count
// once whole words no longer fit.
var fillers = []string{".", " a", ",", " I", " x", "-", "!", "x", ";", " of"}

// textGen builds state texts of an exact token count.
type textGen struct {
	tok   record.Tokenizer
	count map[string]int // tokens of each piece on its own
}

func newTextGen(tok record.Tokenizer) *textGen {
	return &textGen{tok: tok, count: map[string]int{}}
}

func (g *textGen) pieceTokens(p string) int {
	n, ok := g.count[p]
	if !ok {
		n = len(g.tok.Encode(p))
		g.count[p] = n
	}
	return n
}

// maxFixRounds bounds the exact-count corrections at the end of text.
const maxFixRounds = 400

// text returns a deterministic text of exactly target tokens: words drawn
// from seed, sentences of a dozen words. Pieces are counted on their own
// (a word with its leading space is one pre-token of the byte-level BPE),
// then the whole text is counted and the tail corrected word by word and
// with one-token fillers until the count is exact.
func (g *textGen) text(target int, seed uint64) (string, error) {
	rng := rand.New(rand.NewPCG(seed, 0x7e47))
	var pieces []string
	est := 0
	next := func() string {
		w := words[rng.IntN(len(words))]
		if len(pieces) == 0 {
			return strings.ToUpper(w[:1]) + w[1:]
		}
		if rng.IntN(12) == 0 {
			return " " + w + "."
		}
		return " " + w
	}
	for est < target {
		p := next()
		pieces = append(pieces, p)
		est += g.pieceTokens(p)
	}
	exact := func() int { return len(g.tok.Encode(strings.Join(pieces, ""))) }
	n := exact()
	for round := 0; round < maxFixRounds; round++ {
		switch {
		case n == target:
			return strings.Join(pieces, ""), nil
		case n > target:
			// Drop whole pieces worth about the excess, then recount.
			over := n - target
			for over > 0 && len(pieces) > 0 {
				over -= g.pieceTokens(pieces[len(pieces)-1])
				pieces = pieces[:len(pieces)-1]
			}
			n = exact()
		case target-n > 2:
			// Add words worth about the shortfall, staying under it.
			short := target - n - 1
			for short > 0 {
				p := next()
				c := g.pieceTokens(p)
				if c > short {
					break
				}
				pieces = append(pieces, p)
				short -= c
			}
			n = exact()
		default:
			// One or two tokens short: the first filler that adds exactly
			// what fits.
			added := false
			for _, f := range fillers {
				pieces = append(pieces, f)
				if m := exact(); m > n && m <= target {
					n, added = m, true
					break
				}
				pieces = pieces[:len(pieces)-1]
			}
			if !added && len(pieces) > 0 {
				pieces = pieces[:len(pieces)-1]
				n = exact()
			}
		}
	}
	return "", fmt.Errorf("could not build a state of exactly %d tokens with this tokenizer (got %d)", target, n)
}
