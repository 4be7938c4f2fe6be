package substrate_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The domain call alone, without HTTP: the difference to the REST
// benchmark of the same name is the HTTP and JSON overhead.
func BenchmarkServiceWriteSerial(b *testing.B) {
	svc := substrate.New(pgtest.New(b), substrate.Options{})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	p, err := svc.Authenticate(ctx, room.Token)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v, _ := json.Marshal(i)
		if _, err := svc.WriteState(ctx, p, "bench", []substrate.Write{{Scope: "_shared", Key: "k", Value: v}}, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}
