// `node --import ./test/ts-loader.mjs`: tap's test processes import TypeScript (test/ts-hooks.mjs).
import { register } from 'node:module';

register('./ts-hooks.mjs', import.meta.url);
