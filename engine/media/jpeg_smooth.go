package media

// Block smoothing of progressive JPEGs, as libjpeg-turbo 2.1 applies it by
// default (do_block_smoothing) when a progressive file ends before its
// scans have fully refined the lowest AC coefficients (T.81 K.8 idea,
// extended by libjpeg to a 5x5 neighbourhood). For each block, still-zero
// coefficients among the first nine in zigzag order whose precision is
// incomplete are estimated from the DC values of the surrounding 5x5
// blocks; when no AC coefficient of a component has been coded at all, the
// DC value is also re-estimated from its neighbourhood. Complete progressive
// files (every coefficient refined to full precision) are not affected.
//
// The "known precision" of coefficient k of a component is the Al of the
// last scan that covered it, or -1 if none did (libjpeg's coef_bits). If the
// last scan of the file ran out of data at some iMCU row, rows below it use
// the precisions from before the components' latest scans instead.

// smoothKernel is one estimate: the natural index of the coefficient it
// fills, its zigzag index (1..9, where its precision is looked up), and the
// weights over the 5x5 DC neighbourhood (rows and columns -2..+2 around the
// block) with and without DC interpolation. A nil weight table means the
// estimate exists only with DC interpolation.
type smoothKernel struct {
	natural, zigzag int
	interp, plain   *[5][5]int64
}

var smoothKernels = [...]smoothKernel{
	{1, 1, &[5][5]int64{
		{-1, -1, 0, 1, 1},
		{-3, 13, 0, -13, 3},
		{-3, 38, 0, -38, 3},
		{-3, 13, 0, -13, 3},
		{-1, -1, 0, 1, 1},
	}, &[5][5]int64{
		2: {-7, 50, 0, -50, 7},
	}},
	{8, 2, &[5][5]int64{
		{-1, -3, -3, -3, -1},
		{-1, 13, 38, 13, -1},
		{},
		{1, -13, -38, -13, 1},
		{1, 3, 3, 3, 1},
	}, &[5][5]int64{
		{0, 0, -7, 0, 0},
		{0, 0, 50, 0, 0},
		{},
		{0, 0, -50, 0, 0},
		{0, 0, 7, 0, 0},
	}},
	{16, 3, &[5][5]int64{
		{0, 0, 1, 0, 0},
		{0, 2, 7, 2, 0},
		{0, -5, -14, -5, 0},
		{0, 2, 7, 2, 0},
		{0, 0, 1, 0, 0},
	}, &[5][5]int64{
		{0, 0, -1, 0, 0},
		{0, 0, 13, 0, 0},
		{0, 0, -24, 0, 0},
		{0, 0, 13, 0, 0},
		{0, 0, -1, 0, 0},
	}},
	{9, 4, &[5][5]int64{
		{-1, 0, 0, 0, 1},
		{0, 9, 0, -9, 0},
		{},
		{0, -9, 0, 9, 0},
		{1, 0, 0, 0, -1},
	}, &[5][5]int64{
		{0, -1, 0, 1, 0},
		{-1, 10, 0, -10, 1},
		{},
		{1, -10, 0, 10, -1},
		{0, 1, 0, -1, 0},
	}},
	{2, 5, &[5][5]int64{
		{},
		{0, 2, -5, 2, 0},
		{1, 7, -14, 7, 1},
		{0, 2, -5, 2, 0},
		{},
	}, &[5][5]int64{
		2: {-1, 13, -24, 13, -1},
	}},
	{3, 6, &[5][5]int64{
		1: {0, 1, 0, -1, 0},
		2: {0, 2, 0, -2, 0},
		3: {0, 1, 0, -1, 0},
	}, nil},
	{10, 7, &[5][5]int64{
		1: {0, 1, -3, 1, 0},
		3: {0, -1, 3, -1, 0},
	}, nil},
	{17, 8, &[5][5]int64{
		1: {0, 1, 0, -1, 0},
		2: {0, -3, 0, 3, 0},
		3: {0, 1, 0, -1, 0},
	}, nil},
	{24, 9, &[5][5]int64{
		1: {0, 1, 2, 1, 0},
		3: {0, -1, -2, -1, 0},
	}, nil},
}

// smoothDCKernel re-estimates the DC value when no AC data exists.
var smoothDCKernel = [5][5]int64{
	{-2, -6, -8, -6, -2},
	{-6, 6, 42, 6, -6},
	{-8, 42, 152, 42, -8},
	{-6, 6, 42, 6, -6},
	{-2, -6, -8, -6, -2},
}

// smoothingUseful reports whether libjpeg would smooth this frame: a
// progressive frame whose components all have data, nonzero quantizers for
// the DC and the first nine AC coefficients, some DC data, and at least one
// of those AC coefficients not known to full precision.
func (d *jpegDecoder) smoothingUseful() bool {
	if !d.progressive {
		return false
	}
	useful := false
	for i := range d.comps {
		c := &d.comps[i]
		if c.quant == nil {
			return false
		}
		if c.quant[0] == 0 {
			return false
		}
		for _, k := range smoothKernels {
			if c.quant[k.natural] == 0 {
				return false
			}
		}
		if c.coefBits[0] < 0 {
			return false
		}
		for z := 1; z <= 9; z++ {
			if c.coefBits[z] != 0 {
				useful = true
			}
		}
	}
	return useful
}

// smoothComponent runs the inverse DCT over a component's blocks with
// block smoothing.
func (d *jpegDecoder) smoothComponent(c *jpegComponent) {
	// Precisions for rows the last scan reached, and for the rows below.
	var cur, prev [10]int8
	for z := 1; z <= 9; z++ {
		cur[z] = c.coefBits[z]
		prev[z] = -1
		if d.scans > 1 {
			prev[z] = c.prevBits[z]
		}
	}
	q00 := int64(uint16(c.quant[0]))
	stride := c.bw * 8
	lastRow := d.mcusY - 1 // last iMCU row
	lastCol := c.wBlocks - 1
	dc := func(row, col int) int64 { return int64(c.coef[(row*c.bw+col)*64]) }

	// Source block columns of the 5-wide window for each block column,
	// as libjpeg's sliding registers produce them (mostly the clamped
	// neighbours; narrow components differ).
	cols := make([][5]int, c.wBlocks)
	var win [5]int
	for x := 0; x <= lastCol; x++ {
		if x == 0 && x < lastCol {
			win[3] = 1
		}
		if x+1 < lastCol {
			win[4] = x + 2
		}
		cols[x] = win
		win = [5]int{win[1], win[2], win[3], win[4], win[4]}
	}

	var ws [64]int16
	for r := 0; r < c.hBlocks; r++ {
		imcu, b := r/c.v, r%c.v
		blockRows := c.v
		if imcu == lastRow {
			if blockRows = c.hBlocks % c.v; blockRows == 0 {
				blockRows = c.v
			}
		}
		// Neighbour rows, with libjpeg's edge rules.
		var rows [5]int
		rows[2] = r
		rows[1] = r
		if b > 0 || imcu > 0 {
			rows[1] = r - 1
		}
		rows[0] = rows[1]
		if b > 1 || imcu > 1 {
			rows[0] = r - 2
		}
		rows[3] = r
		if b < blockRows-1 || imcu < lastRow {
			rows[3] = r + 1
		}
		rows[4] = rows[3]
		if b < blockRows-2 || imcu+1 < lastRow {
			rows[4] = r + 2
		}
		bits := &cur
		if imcu > d.lastGoodRow {
			bits = &prev
		}
		interp := true
		for z := 1; z <= 9; z++ {
			if bits[z] != -1 {
				interp = false
			}
		}

		for x := 0; x <= lastCol; x++ {
			var nb [5][5]int64
			for i := range 5 {
				for j := range 5 {
					nb[i][j] = dc(rows[i], cols[x][j])
				}
			}
			ws = *(*[64]int16)(c.coef[(r*c.bw+x)*64:])
			for _, k := range smoothKernels {
				al := int(bits[k.zigzag])
				if al == 0 || ws[k.natural] != 0 {
					continue
				}
				w := k.plain
				if interp {
					w = k.interp
				} else if w == nil {
					continue
				}
				qk := int64(uint16(c.quant[k.natural]))
				pred := smoothPredict(q00*weigh(w, &nb), qk)
				if al > 0 && pred >= 1<<al {
					pred = 1<<al - 1
				}
				if q00*weigh(w, &nb) < 0 {
					pred = -pred
				}
				ws[k.natural] = int16(pred)
			}
			if interp {
				num := q00 * weigh(&smoothDCKernel, &nb)
				pred := smoothPredict(num, q00)
				if num < 0 {
					pred = -pred
				}
				ws[0] = int16(pred)
			}
			idctISLOW(&ws, c.quant, c.pix[r*8*stride+x*8:], stride)
		}
	}
}

// weigh sums the weighted DC neighbourhood.
func weigh(w, nb *[5][5]int64) int64 {
	var s int64
	for i := range 5 {
		for j := range 5 {
			s += w[i][j] * nb[i][j]
		}
	}
	return s
}

// smoothPredict turns a weighted DC sum num (already scaled by the DC
// quantizer) into a coefficient for quantizer q, rounded: |num|/(256q)
// to the nearest integer.
func smoothPredict(num, q int64) int64 {
	if num < 0 {
		num = -num
	}
	return ((q << 7) + num) / (q << 8)
}
