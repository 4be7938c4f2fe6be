package mcp

import "testing"

func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":1,"b":"x y","c":true,"d":null}`, "a: 1\nb: x y\nc: true\nd: null"},
		{`{"z":{},"y":[],"x":""}`, "z: {}\ny: []\nx: \"\""},
		{`{"s":"true","n":"42","colon":"a: b","lead":" x","nl":"a\nb","q":"say \"hi\""}`,
			"s: \"true\"\nn: \"42\"\ncolon: \"a: b\"\nlead: \" x\"\nnl: \"a\\nb\"\nq: \"say \\\"hi\\\"\""},
		{`{"list":["a","b"],"objs":[{"k":1},{"k":2}]}`, "list: [a, b]\nobjs: [{k: 1}, {k: 2}]"},
		{`{"deep":{"inner":{"leaf":"v","list":[1,2]},"next":"sync_read_context {\"only\":\"actions\"}"}}`,
			"deep: {inner: {leaf: v, list: [1, 2]}, next: \"sync_read_context {\\\"only\\\":\\\"actions\\\"}\"}"},
		{`{"a":"x, y","b":"z"}`, "a: x, y\nb: z"},
		{`{"o":{"a":"x, y","b":"z"}}`, "o:\n  a: x, y\n  b: z"},
		{`{"alice:agent-1":{"status":"active","note":"` + long + `"}}`,
			"alice:agent-1:\n  status: active\n  note: " + long},
		{`[1,{"a":[{"b":"c","d":"` + long + `"}]}]`, "- 1\n- a:\n    - b: c\n      d: " + long},
		{`"just a string"`, "just a string"},
		{`not json`, "not json"},
	} {
		if got := Text([]byte(c.in)); got != c.want {
			t.Errorf("Text(%s)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

const long = "a long value that is wider than the line limit so the object it is in goes on lines of its own, one per field"
