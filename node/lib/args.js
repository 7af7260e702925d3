'use strict';
// Type checks of the public API's arguments, with Node's own codes: a
// wrong type is a TypeError naming the argument (ERR_INVALID_ARG_TYPE), an
// unknown option a TypeError naming it (ERR_INVALID_ARG_VALUE: the object
// is of the right type, one of its keys is not). Values (ranges, URLs,
// durations, ...) are checked by the native layer, which throws
// ConfigError, or a RangeError (ERR_OUT_OF_RANGE) for a bare number of
// milliseconds too small to be meant (a ttl of 10).

function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return `an instance of ${value.constructor?.name ?? 'Object'}`;
  if (typeof value === 'function') return 'a function';
  return `${typeof value} ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`;
}

function typeError(name, expected, value) {
  // A missing argument is named as missing, not as "not undefined".
  const message = value === undefined ? `${name} is missing: it must be ${expected}` : `${name} must be ${expected}, not ${describe(value)}`;
  const err = new TypeError(message);
  err.code = 'ERR_INVALID_ARG_TYPE';
  return err;
}

function string(name, value) {
  if (typeof value !== 'string') throw typeError(name, 'a string', value);
  return value;
}

/**
 * One resource (a string) or several locked all or nothing (an array of
 * strings, node-redlock's form); an array is copied, so a caller changing
 * it later changes nothing. Names given twice, or none, are the native
 * layer's ConfigError.
 */
function resources(name, value) {
  if (typeof value === 'string') return value;
  if (!Array.isArray(value) || value.some((r) => typeof r !== 'string')) {
    throw typeError(name, 'a string or an array of strings', value);
  }
  return [...value];
}

function number(name, value) {
  if (typeof value !== 'number') throw typeError(name, 'a number', value);
  return value;
}

function optionalNumber(name, value) {
  return value === undefined ? undefined : number(name, value);
}

/**
 * A duration: a number of milliseconds, or a string with its unit ('10s',
 * '500ms', '2m': the CLI's, parsed by the native layer).
 */
function duration(name, value) {
  if (typeof value !== 'number' && typeof value !== 'string') {
    throw typeError(name, "a number of milliseconds or a duration string such as '10s' or '500ms'", value);
  }
  return value;
}

function optionalDuration(name, value) {
  return value === undefined ? undefined : duration(name, value);
}

function optionalBoolean(name, value) {
  if (value !== undefined && typeof value !== 'boolean') throw typeError(name, 'a boolean', value);
  return value ?? false;
}

/** `options` as a plain object of known keys (undefined: `{}`). */
function options(name, value, known) {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw typeError(name, 'an object', value);
  for (const key of Object.keys(value)) {
    if (!known.includes(key) && value[key] !== undefined) {
      const err = new TypeError(`${name}.${key} is not an option; known: ${known.join(', ')}`);
      err.code = 'ERR_INVALID_ARG_VALUE';
      throw err;
    }
  }
  return value;
}

// One string is passed on as it is: the native layer tells one URL (a
// server, or a cluster's seed list) from several joined into one string.
function urls(value) {
  if (typeof value === 'string') return value;
  if (!Array.isArray(value) || value.some((u) => typeof u !== 'string')) {
    throw typeError('urls', 'an array of server URLs such as ["redis://127.0.0.1:7001", ...] or one URL as a string', value);
  }
  return value;
}

function signal(name, value) {
  if (value === undefined) return undefined;
  if (!(value instanceof AbortSignal)) throw typeError(name, 'an AbortSignal', value);
  return value;
}

const TLS_OPTIONS = ['ca', 'cert', 'key', 'rejectUnauthorized'];

/** PEM as text: a string, a Buffer (or Uint8Array), or an array of them (joined). */
function pem(name, value) {
  if (value === undefined) return undefined;
  const one = (v, n) => {
    if (typeof v === 'string') return v;
    if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('utf8');
    throw typeError(n, 'a PEM string or Buffer, or an array of them', v);
  };
  if (Array.isArray(value)) return value.map((v, i) => one(v, `${name}[${i}]`)).join('\n');
  return one(value, name);
}

/** `options.tls` ({ ca, cert, key, rejectUnauthorized }, Node's names) for the native layer. */
function tls(name, value) {
  if (value === undefined) return undefined;
  const opts = options(name, value, TLS_OPTIONS);
  const picked = {};
  for (const key of ['ca', 'cert', 'key']) {
    const text = pem(`${name}.${key}`, opts[key]);
    if (text !== undefined) picked[key] = text;
  }
  if (opts.rejectUnauthorized !== undefined) picked.rejectUnauthorized = optionalBoolean(`${name}.rejectUnauthorized`, opts.rejectUnauthorized);
  return picked;
}

module.exports = { typeError, string, resources, number, optionalNumber, duration, optionalDuration, optionalBoolean, options, urls, signal, tls };
