package mcp

import (
	"encoding/json"
	"strings"
	"testing"
)

// What reading a tools/call before the SDK costs, on a small call and on one with 64 KiB of
// arguments (the gate reads every byte, as the SDK does after it).
func BenchmarkCalledTools(b *testing.B) {
	for name, args := range map[string]string{
		"small": `{"title":"groceries","body":"milk, eggs"}`,
		"64KiB": `{"body":"` + strings.Repeat("x", 64<<10) + `"}`,
	} {
		body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_notes","arguments":` + args +
			`,"_meta":{"progressToken":7}}}`)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				tools, err := calledTools(body)
				if err != nil || len(tools) != 1 || tools[0] != "write_notes" {
					b.Fatalf("calledTools = %v, %v", tools, err)
				}
			}
		})
	}
}

// The same bodies read once by encoding/json into a map, for scale on the same machine.
func BenchmarkUnmarshalForScale(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_notes","arguments":{"body":"` +
		strings.Repeat("x", 64<<10) + `"}}}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			b.Fatal(err)
		}
	}
}
