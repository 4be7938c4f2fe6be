package expr

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// Decode parses JSON into the shapes expressions see: whole numbers become
// int64 (so counters add with integer literals), other numbers float64.
func Decode(raw []byte) (any, error) {
	v, err := DecodeJSON(raw)
	if err != nil {
		return nil, err
	}
	return normalize(v), nil
}

// MustDecode is Decode for values already known to be valid JSON (as read
// back from the database); invalid input decodes to nil.
func MustDecode(raw []byte) any {
	v, err := Decode(raw)
	if err != nil {
		return nil
	}
	return v
}

func normalize(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	}
	return v
}

// ToNative converts a CEL value to JSON-shaped Go values.
func ToNative(v ref.Val) (any, error) {
	switch x := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("result %v is not a JSON number", f)
		}
		return f, nil
	case types.String:
		return string(x), nil
	case types.Bytes:
		return base64.StdEncoding.EncodeToString(x), nil
	case types.Timestamp:
		return x.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return x.Duration.String(), nil
	case *types.Err:
		return nil, x
	}
	if o, ok := v.(*types.Optional); ok {
		if !o.HasValue() {
			return nil, nil
		}
		return ToNative(o.GetValue())
	}
	if m, ok := v.(traits.Mapper); ok {
		out := map[string]any{}
		it := m.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.(types.String)
			var key string
			if ok {
				key = string(ks)
			} else {
				key = fmt.Sprint(k.Value())
			}
			e, err := ToNative(m.Get(k))
			if err != nil {
				return nil, err
			}
			out[key] = e
		}
		return out, nil
	}
	if l, ok := v.(traits.Lister); ok {
		n, _ := l.Size().(types.Int)
		out := make([]any, 0, int(n))
		it := l.Iterator()
		for it.HasNext() == types.True {
			e, err := ToNative(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	if t, ok := v.(ref.Type); ok {
		return t.TypeName(), nil
	}
	return nil, fmt.Errorf("result of type %s cannot be returned as JSON", v.Type().TypeName())
}
