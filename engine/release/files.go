package release

// File names of a release directory (the Cloudflare/clef-omni layout) and of
// the GGUF pair clef quantize writes.
const (
	ConfigFile          = "config.json"                  // the composed model's configuration
	IndexFile           = "model.safetensors.index.json" // shard index of the thinker weights
	SingleFile          = "model.safetensors"            // unsharded thinker weights
	HeadWeightsFile     = "joint_head.safetensors"       // the joint schema head
	HeadConfigFile      = "joint_head_config.json"       // its constructor arguments
	TokenizerFile       = "tokenizer.json"               // Hugging Face tokenizer
	TokenizerConfigFile = "tokenizer_config.json"        // added tokens, special ids
	ProcessorConfigFile = "processor_config.json"        // the Omni processor's settings
	PreprocessorFile    = "preprocessor_config.json"     // image/audio preprocessing

	// GGUFExt names a backbone GGUF file; CompanionExt its companion
	// (FILE.gguf -> FILE.head.gguf) holding the head, the towers and the
	// release's configuration files as metadata.
	GGUFExt      = ".gguf"
	CompanionExt = ".head.gguf"
)

// Metadata keys of the companion GGUF: the release's configuration files,
// verbatim.
const (
	GGUFConfigKey       = "clef.config"
	GGUFHeadConfigKey   = "clef.head_config"
	GGUFProcessorKey    = "clef.processor_config"
	GGUFPreprocessorKey = "clef.preprocessor_config"
	GGUFBackboneKey     = "clef.backbone"
	GGUFFileTypeKey     = "clef.file_type"
	// GGUFHeadArch is general.architecture of the companion.
	GGUFHeadArch = "clef_head"
)

// ConfigFiles are the configuration files the companion GGUF carries, with
// their metadata keys.
var ConfigFiles = []struct{ File, Key string }{
	{ConfigFile, GGUFConfigKey},
	{HeadConfigFile, GGUFHeadConfigKey},
	{ProcessorConfigFile, GGUFProcessorKey},
	{PreprocessorFile, GGUFPreprocessorKey},
}

// Checkpoint prefixes of the release's safetensors: the thinker is used; the
// talker and code2wav (speech output) are present in the release and are
// skipped; any other prefix in a thinker shard is an error.
const (
	ThinkerPrefix  = "thinker."
	TalkerPrefix   = "talker."
	Code2WavPrefix = "code2wav."
)
