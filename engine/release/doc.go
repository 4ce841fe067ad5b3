// Package release owns what Clef-Omni's release is: the names of its files,
// its one typed configuration (the thinker's text decoder, vision and audio
// towers, the joint head, the processor), read from config.json or from
// GGUF metadata with one set of defaults and limits, and the tensor table of
// every architecture: checkpoint name, GGUF name, quantization role and
// shape as a function of the configuration.
//
// Everything that needs to know a model tensor by name iterates these
// tables: the model code binding its weights, clef quantize's policy,
// clef inspect, and the synthetic models of clef bench. The weights package
// below it knows containers (safetensors, GGUF, MLX), never model names;
// Open maps a path onto a Release: the configuration and the mapped files.
package release
