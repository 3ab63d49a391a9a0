# Pushes, to the queue ARGV[0], jobs whose options a Ruby app unset with nil, which
# Sidekiq's client keeps as JSON null ("retry":null, "tags":null, "retry_for":null): one that
# records its arguments and one that fails; prints {"plain": jid, "failing": jid}.
require 'json'
require 'sidekiq'

queue = ARGV.fetch(0)
unset = {'queue' => queue, 'retry' => nil, 'tags' => nil, 'retry_for' => nil}
plain = Sidekiq::Client.push(unset.merge('class' => 'Interop::Record', 'args' => ['nil options']))
failing = Sidekiq::Client.push(unset.merge('class' => 'Interop::Fail', 'args' => [9]))
puts JSON.generate('plain' => plain, 'failing' => failing)
