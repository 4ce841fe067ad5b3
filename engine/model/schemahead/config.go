package schemahead

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// ConfigFile is the name of the head's configuration in a release directory.
const ConfigFile = "joint_head_config.json"

// WeightsFile is the name of the head's weights in a release directory.
const WeightsFile = "joint_head.safetensors"

// Config is joint_head_config.json: the constructor arguments of the
// reference JointSchemaHead.
type Config struct {
	HiddenSize    int `json:"hidden_size"`    // backbone hidden size (thinker text hidden_size)
	Width         int `json:"width"`          // head width
	RoutingLayers int `json:"routing_layers"` // evidence-routing layers
	Layers        int `json:"layers"`         // decoder layers over the fields
	Heads         int `json:"heads"`          // attention heads in every attention block
	Feedforward   int `json:"feedforward"`    // feed-forward inner size
	// Dropout is accepted (some ports write it) and ignored: inference only.
	Dropout float64 `json:"dropout,omitempty"`
}

// Limits on the configuration: generous for any real head, small enough that
// a damaged file cannot ask for absurd allocations.
const (
	maxDim    = 1 << 16
	maxLayers = 256
)

// ParseConfig decodes and checks joint_head_config.json. Unknown keys are an
// error, as the reference constructor would reject them.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadConfig reads and checks a joint_head_config.json file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("joint head config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate reports the first implausible value of the configuration.
func (c Config) Validate() error {
	dims := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"width", c.Width}, {"heads", c.Heads}, {"feedforward", c.Feedforward},
	}
	for _, d := range dims {
		if d.v <= 0 || d.v > maxDim {
			return fmt.Errorf("%s: %s = %d, want 1..%d", ConfigFile, d.name, d.v, maxDim)
		}
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"routing_layers", c.RoutingLayers}, {"layers", c.Layers}} {
		if d.v < 0 || d.v > maxLayers {
			return fmt.Errorf("%s: %s = %d, want 0..%d", ConfigFile, d.name, d.v, maxLayers)
		}
	}
	if c.Width%c.Heads != 0 {
		return fmt.Errorf("%s: width %d is not a multiple of heads %d", ConfigFile, c.Width, c.Heads)
	}
	if c.Dropout < 0 || c.Dropout >= 1 {
		return fmt.Errorf("%s: dropout = %g, want [0, 1)", ConfigFile, c.Dropout)
	}
	return nil
}
