//! Binary payloads shared by tools, resources and prompts. Nothing compares
//! them byte for byte; they only need to be valid base64 of what their
//! `mimeType` says.

/// A 1x1 red PNG, base64.
pub const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// A one-sample WAV, base64.
pub const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";
