import { describe, expect, it } from 'vitest';
import { filterListProblems, parseFilterList, topicProblem } from './topic';

describe('topicProblem matches the API rules', () => {
  const cases: [string, boolean, string][] = [
    ['a/b', false, ''],
    ['#', false, ''],
    ['+', false, ''],
    ['a/+/c/#', false, ''],
    ['/', false, ''],
    ['$SYS/#', false, ''],
    ['', false, 'must not be empty'],
    ['a/#/b', false, '# must be a whole level and the last one'],
    ['a#', false, '# must be a whole level and the last one'],
    ['a/b+', false, '+ must be a whole level'],
    ['a\u0000b', false, 'must not contain U+0000'],
    ['a/+', true, 'a topic name must not contain the wildcards + or #'],
    ['a/b', true, ''],
    ['x'.repeat(65536), false, 'must be at most 65535 bytes'],
    ['é'.repeat(32768), false, 'must be at most 65535 bytes'], // 2 bytes each in UTF-8
    ['\uD800', false, 'must be valid UTF-8'],
    ['😀/#', false, ''],
  ];
  for (const [s, name, want] of cases) {
    it(`${JSON.stringify(s.slice(0, 12))} name=${name}`, () => expect(topicProblem(s, name)).toBe(want));
  }
});

describe('filter lists', () => {
  it('splits lines and commas, drops blanks', () => {
    expect(parseFilterList(' a/#\n\nb/+ , c ')).toEqual(['a/#', 'b/+', 'c']);
  });
  it('names each bad filter and duplicates', () => {
    expect(filterListProblems(['a/#', 'a/#/b', 'a/#'])).toEqual([
      { filter: 'a/#/b', problem: '# must be a whole level and the last one' },
      { filter: 'a/#', problem: 'is listed twice' },
    ]);
  });
});
