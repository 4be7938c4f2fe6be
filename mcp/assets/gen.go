//go:build ignore

// gen draws sync's icon: two linked rings (agents in sync) on a rounded
// teal square. Run `go run gen.go` here to rewrite icon.png (128×128, for
// serverInfo.icons) and favicon.ico (a 32×32 PNG in an ICO container).
package main

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
)

func main() {
	big := draw(128)
	must(os.WriteFile("icon.png", encode(big), 0o644))
	small := encode(draw(32))
	// ICO: header, one directory entry, the PNG (supported since Vista
	// and by every browser).
	var ico bytes.Buffer
	binary.Write(&ico, binary.LittleEndian, []uint16{0, 1, 1})
	ico.Write([]byte{32, 32, 0, 0})
	binary.Write(&ico, binary.LittleEndian, []uint16{1, 32})
	binary.Write(&ico, binary.LittleEndian, []uint32{uint32(len(small)), 22})
	ico.Write(small)
	must(os.WriteFile("favicon.ico", ico.Bytes(), 0o644))
}

func encode(img image.Image) []byte {
	var b bytes.Buffer
	must((&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, img))
	return b.Bytes()
}

// draw renders the icon at n×n pixels, 4×4 supersampled.
func draw(n int) image.Image {
	img := image.NewNRGBA(image.Rect(0, 0, n, n))
	const ss = 4
	bg := [3]float64{0x0f, 0x76, 0x6e}
	for y := 0; y < n; y++ {
		for x := 0; x < n; x++ {
			var cov, white float64
			for sy := 0; sy < ss; sy++ {
				for sx := 0; sx < ss; sx++ {
					u := (float64(x) + (float64(sx)+0.5)/ss) / float64(n)
					v := (float64(y) + (float64(sy)+0.5)/ss) / float64(n)
					if !inRoundedSquare(u, v, 0.22) {
						continue
					}
					cov++
					if ring(u, v, 0.38, 0.5) || ring(u, v, 0.62, 0.5) {
						white++
					}
				}
			}
			if cov == 0 {
				continue
			}
			t := white / cov
			c := color.NRGBA{A: uint8(255 * cov / (ss * ss))}
			c.R = uint8(bg[0] + (255-bg[0])*t)
			c.G = uint8(bg[1] + (255-bg[1])*t)
			c.B = uint8(bg[2] + (255-bg[2])*t)
			img.Set(x, y, c)
		}
	}
	return img
}

func inRoundedSquare(u, v, r float64) bool {
	dx := math.Max(math.Max(r-u, u-(1-r)), 0)
	dy := math.Max(math.Max(r-v, v-(1-r)), 0)
	return dx*dx+dy*dy <= r*r
}

func ring(u, v, cx, cy float64) bool {
	d := math.Hypot(u-cx, v-cy)
	return d >= 0.17 && d <= 0.245
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
