class_name LoreguardPackageFile
extends RefCounted
## Reads a debug package written by `loreguard audit export` (or the debugger tab's export
## button): the JSON form, or the compressed form (magic header, sha256 of the zlib stream,
## the stream), told apart by the magic. The compressed form's hash is checked here; the JSON
## form's hash covers canonical JSON, which `loreguard replay` verifies.

const MAGIC := [0x89, 0x4C, 0x47, 0x44, 0x50, 0x0D, 0x0A, 0x1A]
const FORMAT_VERSION := 1
const HEADER_SIZE := 41

## The package's records (dictionaries, as the sidecar records them), oldest first.
var records: Array = []
## The whole package: records, blobs (memory images, profiles, config), model fingerprint.
var package: Dictionary = {}
## "json" or "compressed".
var form: String = ""
## Empty when the package was read; otherwise why not.
var error: String = ""


static func read(path: String) -> LoreguardPackageFile:
	var out := LoreguardPackageFile.new()
	var bytes := FileAccess.get_file_as_bytes(path)
	if bytes.is_empty():
		out.error = "cannot read %s (%s)" % [path, error_string(FileAccess.get_open_error())]
		return out
	out._parse(bytes)
	return out


static func from_bytes(bytes: PackedByteArray) -> LoreguardPackageFile:
	var out := LoreguardPackageFile.new()
	out._parse(bytes)
	return out


func _parse(bytes: PackedByteArray) -> void:
	var document: Variant
	if bytes.size() >= MAGIC.size() and Array(bytes.slice(0, MAGIC.size())) == MAGIC:
		form = "compressed"
		document = _inflate(bytes)
		if not error.is_empty():
			return
	else:
		form = "json"
		var outer: Variant = JSON.parse_string(bytes.get_string_from_utf8())
		if typeof(outer) != TYPE_DICTIONARY or not outer.has("loreguard_debug_package"):
			error = "not a Loreguard debug package"
			return
		if int(outer["loreguard_debug_package"]) != FORMAT_VERSION:
			error = "package format %s is not supported" % str(outer["loreguard_debug_package"])
			return
		document = outer.get("package")
	if typeof(document) != TYPE_DICTIONARY or typeof(document.get("records")) != TYPE_ARRAY:
		error = "the package has no records"
		return
	package = document
	records = document["records"]


func _inflate(bytes: PackedByteArray) -> Variant:
	if bytes.size() < HEADER_SIZE:
		error = "truncated compressed package"
		return null
	if bytes[MAGIC.size()] != FORMAT_VERSION:
		error = "package format %d is not supported" % bytes[MAGIC.size()]
		return null
	var stream := bytes.slice(HEADER_SIZE)
	var hashing := HashingContext.new()
	hashing.start(HashingContext.HASH_SHA256)
	hashing.update(stream)
	if hashing.finish() != bytes.slice(MAGIC.size() + 1, HEADER_SIZE):
		error = "integrity check failed: the package was changed after export"
		return null
	# zlib stream: Godot's DEFLATE mode reads the zlib wrapper Python's zlib writes.
	var text := stream.decompress_dynamic(-1, FileAccess.COMPRESSION_DEFLATE).get_string_from_utf8()
	var document: Variant = JSON.parse_string(text)
	if document == null:
		error = "the compressed payload is not JSON"
	return document
